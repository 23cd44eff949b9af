// The rendezvous store: a server on 127.0.0.1 and clients in this process.
#include "parallel/tcp_store.h"

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <optional>
#include <thread>

#include "core/error.h"

using namespace alloy;
using namespace alloy::parallel;
using namespace std::chrono_literals;

namespace {

std::vector<char> bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

struct Served {
  TcpStoreServer server{"127.0.0.1", 0};
  TcpStore client{"127.0.0.1", server.port(), 2s};
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tcp_store)

BOOST_AUTO_TEST_CASE(set_then_get_returns_the_same_bytes) {
  Served store;
  const std::vector<char> value{'a', '\0', 'b', '\xff'};
  store.client.set("key", value);
  BOOST_TEST(store.client.get("key") == value);
  store.client.set("key", bytes("replaced"));
  BOOST_TEST(store.client.get("key") == bytes("replaced"));
}

BOOST_AUTO_TEST_CASE(get_waits_for_a_key_another_client_sets_later) {
  Served store;
  std::thread setter([port = store.server.port()] {
    TcpStore other("127.0.0.1", port, 2s);
    std::this_thread::sleep_for(200ms);
    other.set("late", bytes("here"));
  });
  const auto start = std::chrono::steady_clock::now();
  const auto value = store.client.get("late");
  const auto waited = std::chrono::steady_clock::now() - start;
  setter.join();
  BOOST_TEST(value == bytes("here"));
  BOOST_TEST((waited >= 150ms));
}

BOOST_AUTO_TEST_CASE(waiting_reports_the_keys_still_missing_at_the_deadline) {
  Served store;
  store.client.set("a", bytes("1"));
  const auto start = std::chrono::steady_clock::now();
  const auto missing = store.client.missing_after({"a", "b", "c"}, 300ms);
  BOOST_TEST((std::chrono::steady_clock::now() - start >= 250ms));
  BOOST_TEST(missing == (std::vector<std::string>{"b", "c"}));
  BOOST_TEST(store.client.missing_after({"a"}, 0ms).empty());
  BOOST_TEST(!store.client.try_get("b", 50ms).has_value());
  BOOST_CHECK_EXCEPTION(store.client.wait({"a", "b"}, 100ms), Error, [](const Error& error) {
    return contains(error.what(),
                    "timed out after 0.1 s waiting for 'b' in the store at 127.0.0.1:");
  });
}

BOOST_AUTO_TEST_CASE(get_gives_up_after_the_store_timeout_naming_the_key) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore client("127.0.0.1", server.port(), 200ms);
  BOOST_CHECK_EXCEPTION(client.get("never"), Error, [](const Error& error) {
    return contains(error.what(), "timed out after 0.2 s waiting for 'never'");
  });
}

BOOST_AUTO_TEST_CASE(a_rank_can_join_only_once) {
  Served store;
  TcpStore other("127.0.0.1", store.server.port(), 2s);
  store.client.join_as(1);
  BOOST_CHECK_EXCEPTION(other.join_as(1), Error, [](const Error& error) {
    return contains(error.what(), "rank 1 has already joined from another process");
  });
  other.join_as(2);
}

BOOST_AUTO_TEST_CASE(the_server_records_ranks_that_leave) {
  Served store;
  std::optional<TcpStore> leaving;
  leaving.emplace("127.0.0.1", store.server.port(), 2s);
  leaving->join_as(3);
  BOOST_TEST(!store.client.try_get(kDepartedKey, 0ms).has_value());
  leaving.reset();
  BOOST_TEST((store.client.try_get(kDepartedKey, 2s) == bytes("3 left\n")));
}

BOOST_AUTO_TEST_CASE(the_server_waits_until_every_rank_has_left) {
  Served store;  // its client never joins as a rank: it is not waited for
  BOOST_TEST(store.server.wait_for_ranks_to_leave(0ms));
  std::optional<TcpStore> one, two;
  one.emplace("127.0.0.1", store.server.port(), 2s);
  one->join_as(1);
  two.emplace("127.0.0.1", store.server.port(), 2s);
  two->join_as(2);
  BOOST_TEST(!store.server.wait_for_ranks_to_leave(50ms));
  one.reset();
  BOOST_TEST(!store.server.wait_for_ranks_to_leave(100ms));  // rank 2 is still there
  std::optional<std::vector<char>> last_read;
  std::thread leaving([&] {
    std::this_thread::sleep_for(100ms);
    last_read = two->try_get(kDepartedKey, 1s);  // the store still answers a late reader
    two.reset();
  });
  const auto started = std::chrono::steady_clock::now();
  BOOST_TEST(store.server.wait_for_ranks_to_leave(10s));
  BOOST_TEST((std::chrono::steady_clock::now() - started < 5s));  // woken by the departure
  leaving.join();
  BOOST_TEST((last_read == bytes("1 left\n")));
}

BOOST_AUTO_TEST_CASE(a_client_that_loses_the_server_says_so) {
  std::optional<TcpStoreServer> server;
  server.emplace("127.0.0.1", 0);
  TcpStore client("127.0.0.1", server->port(), 2s);
  const std::string endpoint = client.endpoint();
  server.reset();
  BOOST_CHECK_EXCEPTION(client.get("anything"), Error, [&](const Error& error) {
    return contains(error.what(), "the master at " + endpoint);
  });
}

BOOST_AUTO_TEST_SUITE_END()
