// The emulated NCCL: a communicator of one rank through its whole life, all-reduce (every
// operation, in and out of place, every dtype the project uses) and broadcast, and the clear
// refusal of more than one rank.
#define BOOST_TEST_MODULE cuda_emulator_nccl
#include <boost/test/unit_test.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) {
    BOOST_REQUIRE_EQUAL(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  ~DeviceMemory() { static_cast<void>(cudaFree(data_)); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A communicator of one rank, made as the project makes it (a config, then polling).
struct OneRank {
  OneRank() {
    ncclUniqueId id;
    BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
    BOOST_REQUIRE(started == ncclSuccess || started == ncclInProgress);
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress)
      BOOST_REQUIRE_EQUAL(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    BOOST_REQUIRE_EQUAL(state, ncclSuccess);
  }
  ~OneRank() {
    BOOST_CHECK_EQUAL(ncclCommFinalize(comm), ncclSuccess);
    BOOST_CHECK_EQUAL(ncclCommDestroy(comm), ncclSuccess);
  }
  OneRank(const OneRank&) = delete;
  OneRank& operator=(const OneRank&) = delete;
  ncclComm_t comm = nullptr;
};

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<unsigned char> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<unsigned char>(i * 37 + seed);
  return out;
}

std::vector<unsigned char> read(const DeviceMemory& memory, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(out.data(), memory.get(), bytes, cudaMemcpyDeviceToHost),
                      cudaSuccess);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(all_reduce_and_broadcast_of_one_rank_return_every_bit) {
  const OneRank rank;
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamCreate(&stream), cudaSuccess);
  const std::size_t count = 1000;
  for (const auto& [type, size] : {std::pair<ncclDataType_t, std::size_t>{ncclFloat32, 4},
                                   {ncclFloat16, 2},
                                   {ncclBfloat16, 2},
                                   {ncclUint8, 1}}) {
    for (const ncclRedOp_t op : {ncclSum, ncclAvg, ncclMax, ncclMin}) {
      const auto values = pattern(count * size, static_cast<unsigned>(op * 13 + type));
      const DeviceMemory send(count * size), receive(count * size);
      BOOST_REQUIRE_EQUAL(
          cudaMemcpy(send.get(), values.data(), values.size(), cudaMemcpyHostToDevice),
          cudaSuccess);
      BOOST_REQUIRE_EQUAL(
          ncclAllReduce(send.get(), receive.get(), count, type, op, rank.comm, stream),
          ncclSuccess);
      BOOST_TEST(read(receive, values.size()) == values, "out of place, type " << type);
      BOOST_REQUIRE_EQUAL(ncclAllReduce(send.get(), send.get(), count, type, op, rank.comm, stream),
                          ncclSuccess);
      BOOST_TEST(read(send, values.size()) == values, "in place, type " << type);
    }
  }
  const auto bytes = pattern(333, 5);
  const DeviceMemory buffer(bytes.size()), other(bytes.size());
  BOOST_REQUIRE_EQUAL(cudaMemcpy(buffer.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(
      ncclBroadcast(buffer.get(), buffer.get(), bytes.size(), ncclUint8, 0, rank.comm, stream),
      ncclSuccess);
  BOOST_REQUIRE_EQUAL(
      ncclBroadcast(buffer.get(), other.get(), bytes.size(), ncclUint8, 0, rank.comm, stream),
      ncclSuccess);
  BOOST_TEST(read(buffer, bytes.size()) == bytes);
  BOOST_TEST(read(other, bytes.size()) == bytes);
  BOOST_TEST(ncclBroadcast(buffer.get(), other.get(), 1, ncclUint8, 1, rank.comm, stream) ==
             ncclInvalidArgument);
  BOOST_TEST(ncclAllReduce(buffer.get(), other.get(), 1, static_cast<ncclDataType_t>(99), ncclSum,
                           rank.comm, stream) == ncclInvalidArgument);
  BOOST_REQUIRE_EQUAL(cudaStreamDestroy(stream), cudaSuccess);
}

BOOST_AUTO_TEST_CASE(more_than_one_rank_is_a_usage_error_that_says_why) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = nullptr;
  BOOST_TEST(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInvalidUsage);
  BOOST_TEST(std::string(ncclGetLastError(comm)) ==
             "the CUDA emulator's NCCL runs communicators of one rank only");
  BOOST_TEST(ncclCommInitRankConfig(&comm, 1, id, 1, &config) == ncclInvalidArgument);
  ncclConfig_t uninitialised{};
  BOOST_TEST(ncclCommInitRankConfig(&comm, 1, id, 0, &uninitialised) == ncclInvalidArgument);
  BOOST_TEST(std::string(ncclGetErrorString(ncclInvalidUsage)) ==
             "invalid usage (run with NCCL_DEBUG=WARN for details)");
  BOOST_TEST(ncclCommAbort(nullptr) == ncclSuccess);
}

BOOST_AUTO_TEST_CASE(a_finalized_communicator_refuses_collectives_and_abort_frees_it) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  BOOST_REQUIRE_EQUAL(ncclCommInitRankConfig(&comm, 1, id, 0, nullptr), ncclSuccess);
  const DeviceMemory buffer(16);
  BOOST_REQUIRE_EQUAL(ncclCommFinalize(comm), ncclSuccess);
  BOOST_TEST(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, comm, nullptr) ==
             ncclInvalidUsage);
  BOOST_TEST(std::string(ncclGetLastError(comm)).find("finalized") != std::string::npos);
  BOOST_TEST(ncclCommAbort(comm) == ncclSuccess);
}
