// QueuedDownload on the CPU (core/queued_download.h): the copy is made at queue(), has arrived
// at once, and costs one download and no host wait, as the same use does on a GPU.
#include "core/queued_download.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/round_trips.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(queued_download)

BOOST_AUTO_TEST_CASE(a_copy_taken_at_queue_one_download_no_wait) {
  Tensor source = Tensor::from_floats({3}, {1.5f, -2.0f, 8.0f});
  QueuedDownload download;
  BOOST_TEST(!download.queued());
  const RoundTrips before = round_trips();
  download.queue(source);
  source.fill(0.0f);  // after the queue: not in the copy
  BOOST_TEST(download.queued());
  BOOST_TEST(download.arrived());
  std::vector<float> copy(3);
  std::memcpy(copy.data(), download.read(), sizeof(float) * copy.size());
  const RoundTrips cost = round_trips() - before;
  BOOST_TEST(!download.queued());
  BOOST_TEST(copy == (std::vector<float>{1.5f, -2.0f, 8.0f}), boost::test_tools::per_element());
  BOOST_TEST(cost.downloads == 1u);
  BOOST_TEST(cost.host_waits == 0u);
  BOOST_TEST(cost.uploads == 0u);
}

BOOST_AUTO_TEST_CASE(one_copy_at_a_time) {
  const Tensor source = Tensor::from_floats({1}, {4.0f});
  QueuedDownload download;
  BOOST_CHECK_THROW(download.read(), Error);  // nothing queued
  BOOST_CHECK_THROW(download.arrived(), Error);
  download.queue(source);
  BOOST_CHECK_THROW(download.queue(source), Error);  // not read yet
  download.read();
  BOOST_CHECK_THROW(download.read(), Error);  // read once
  download.queue(source);                     // and again
  float value = 0.0f;
  std::memcpy(&value, download.read(), sizeof value);
  BOOST_TEST(value == 4.0f);
}

BOOST_AUTO_TEST_SUITE_END()
