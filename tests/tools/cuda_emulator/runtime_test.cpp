// The emulated CUDA runtime: deferred streams, events, the legacy stream's ordering, copies
// and their checks, device memory and its protection, errors (last and sticky), and graph
// capture with its mode rules. Kernels are real ones (prelude.h, ALLOY_LAUNCH), run by the
// kernel engine when their stream is synchronised.
#define BOOST_TEST_MODULE cuda_emulator_runtime
#include <boost/test/unit_test.hpp>

// clang-format off: the prelude comes first, as in every emulated .cu file
#include "tools/cuda_emulator/prelude.h"
// clang-format on

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/ops/cuda/common.cuh"
#include "tools/cuda_emulator/emulator.h"

using alloy::emulator::DeviceFault;
using alloy::emulator::enqueue;
using alloy::emulator::Work;

namespace {

// Device 0 serves most tests; device 1 peer copies; device 2 is lost to the sticky-fault
// test. 64 MiB each, so that capacity is easy to reach.
constexpr std::size_t kCapacity = std::size_t{64} << 20;

// Set where a test runs this program again with a configuration of its own.
constexpr const char* kOwnConfiguration = "ALLOY_EMULATOR_RUNTIME_TEST_OWN_CONFIGURATION";

struct Environment {
  Environment() {
    if (std::getenv(kOwnConfiguration) != nullptr) return;
    setenv("ALLOY_EMULATOR_DEVICES", "3", 1);
    setenv("ALLOY_EMULATOR_MEMORY", "64M", 1);
  }
};
BOOST_TEST_GLOBAL_FIXTURE(Environment);

__global__ void fill_kernel(float* data, int count, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < count) data[i] = value;
}

// Appends `value` to `log` when the stream runs it.
Work note(std::vector<int>& log, int value) {
  return Work{"note " + std::to_string(value), [&log, value] { log.push_back(value); }};
}

std::vector<int> ints(std::initializer_list<int> values) {
  return values;
}

// A non-blocking stream (as the project's), destroyed at scope end.
class Stream {
 public:
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    BOOST_REQUIRE_EQUAL(cudaStreamCreateWithFlags(&stream_, flags), cudaSuccess);
  }
  ~Stream() { static_cast<void>(cudaStreamDestroy(stream_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  explicit Event(unsigned flags = cudaEventDisableTiming) {
    BOOST_REQUIRE_EQUAL(cudaEventCreateWithFlags(&event_, flags), cudaSuccess);
  }
  ~Event() { static_cast<void>(cudaEventDestroy(event_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    BOOST_REQUIRE_EQUAL(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)),
                        cudaSuccess);
  }
  ~DeviceArray() { static_cast<void>(cudaFree(data_)); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  std::vector<T> read() const {
    std::vector<T> host(count_);
    BOOST_REQUIRE_EQUAL(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost),
                        cudaSuccess);
    return host;
  }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

template <class T>
class PinnedArray {
 public:
  explicit PinnedArray(std::size_t count) {
    BOOST_REQUIRE_EQUAL(cudaHostAlloc(reinterpret_cast<void**>(&data_), count * sizeof(T), 0),
                        cudaSuccess);
  }
  ~PinnedArray() { static_cast<void>(cudaFreeHost(data_)); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  T* get() const { return data_; }
  T& operator[](std::size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
};

// Runs `body` in a child process whose stderr is collected; returns how the child ended
// (waitpid's status) and its stderr.
std::pair<int, std::string> in_child(const std::function<void()>& body) {
  int pipe_ends[2];
  BOOST_REQUIRE_EQUAL(pipe(pipe_ends), 0);
  std::fflush(nullptr);
  const pid_t child = fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    // Boost.Test's handlers would report the abort and carry on testing in the child.
    signal(SIGABRT, SIG_DFL);
    dup2(pipe_ends[1], STDERR_FILENO);
    close(pipe_ends[0]);
    body();
    _exit(0);
  }
  close(pipe_ends[1]);
  std::string output;
  char buffer[512];
  ssize_t got = 0;
  while ((got = read(pipe_ends[0], buffer, sizeof buffer)) > 0) {
    output.append(buffer, static_cast<std::size_t>(got));
  }
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return {status, output};
}

bool aborted(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

// Clears the calling thread's last error before and checks it after a test case's calls.
struct CleanErrors {
  CleanErrors() {
    BOOST_REQUIRE_EQUAL(cudaSetDevice(0), cudaSuccess);
    static_cast<void>(cudaGetLastError());
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(runtime, CleanErrors)

BOOST_AUTO_TEST_CASE(devices_come_from_the_environment_with_h100_properties) {
  int count = 0;
  BOOST_REQUIRE_EQUAL(cudaGetDeviceCount(&count), cudaSuccess);
  BOOST_TEST(count == 3);
  cudaDeviceProp properties;
  std::memset(&properties, 0x5A, sizeof properties);
  BOOST_REQUIRE_EQUAL(cudaGetDeviceProperties(&properties, 1), cudaSuccess);
  BOOST_TEST(std::string(properties.name) == "Alloy CUDA emulator");
  BOOST_TEST(properties.major == 9);
  BOOST_TEST(properties.minor == 0);
  BOOST_TEST(properties.multiProcessorCount == 132);
  BOOST_TEST(properties.warpSize == 32);
  BOOST_TEST(properties.maxThreadsPerBlock == 1024);
  BOOST_TEST(properties.sharedMemPerBlock == 48u << 10);
  BOOST_TEST(properties.totalGlobalMem == kCapacity);
  BOOST_TEST(properties.tccDriver == 0);  // zero-initialised, not left as it was
  BOOST_TEST(cudaGetDeviceProperties(&properties, 3) == cudaErrorInvalidDevice);
  BOOST_TEST(cudaSetDevice(-1) == cudaErrorInvalidDevice);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidDevice);
  char bus[32];
  BOOST_REQUIRE_EQUAL(cudaDeviceGetPCIBusId(bus, sizeof bus, 1), cudaSuccess);
  BOOST_TEST(std::string(bus) == "0000:02:00.0");
  BOOST_TEST(cudaDeviceGetPCIBusId(bus, 4, 1) == cudaErrorInvalidValue);
}

BOOST_AUTO_TEST_CASE(a_bad_configuration_is_fatal_at_first_use) {
  const std::pair<const char*, const char*> settings[] = {
      {"ALLOY_EMULATOR_MEMORY", "12X"}, {"ALLOY_EMULATOR_MEMORY", "0"},
      {"ALLOY_EMULATOR_MEMORY", "-5G"}, {"ALLOY_EMULATOR_MEMORY", "G"},
      {"ALLOY_EMULATOR_MPROTECT", "2"}, {"ALLOY_EMULATOR_MPROTECT", "yes"},
      {"ALLOY_EMULATOR_MPROTECT", ""}};
  for (const auto& [variable, value] : settings) {
    const auto [status, output] = in_child([variable = variable, value = value] {
      setenv(kOwnConfiguration, "1", 1);
      setenv(variable, value, 1);
      execl("/proc/self/exe", "runtime_test",
            "--run_test=runtime/devices_come_from_the_environment_with_h100_properties",
            static_cast<char*>(nullptr));
    });
    BOOST_TEST(aborted(status), variable << "=" << value);
    BOOST_TEST(output.find(std::string("alloy CUDA emulator: ") + variable + "=\"" + value +
                           "\" is not valid") != std::string::npos,
               output);
  }
}

BOOST_AUTO_TEST_CASE(work_runs_on_its_streams_device_whichever_thread_waits) {
  BOOST_REQUIRE_EQUAL(cudaSetDevice(1), cudaSuccess);
  Stream stream;
  int seen = -1;
  BOOST_REQUIRE_EQUAL(enqueue(stream.get(), Work{"read the device", [&] { cudaGetDevice(&seen); }}),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaSetDevice(0), cudaSuccess);
  std::thread([&] { cudaStreamSynchronize(stream.get()); }).join();
  BOOST_TEST(seen == 1);
}

BOOST_AUTO_TEST_CASE(the_current_device_belongs_to_each_host_thread) {
  BOOST_REQUIRE_EQUAL(cudaSetDevice(1), cudaSuccess);
  int seen_by_other = -1;
  std::thread([&] { cudaGetDevice(&seen_by_other); }).join();
  int current = -1;
  BOOST_REQUIRE_EQUAL(cudaGetDevice(&current), cudaSuccess);
  BOOST_TEST(current == 1);
  BOOST_TEST(seen_by_other == 0);
}

BOOST_AUTO_TEST_CASE(error_names_and_strings) {
  BOOST_TEST(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) ==
             "cudaErrorMemoryAllocation");
  BOOST_TEST(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
  BOOST_TEST(std::string(cudaGetErrorName(cudaErrorStreamCaptureInvalidated)) ==
             "cudaErrorStreamCaptureInvalidated");
  BOOST_TEST(std::string(cudaGetErrorName(cudaErrorTimeout)) == "cudaErrorTimeout");
  BOOST_TEST(std::string(cudaGetErrorName(static_cast<cudaError_t>(4242))) ==
             "unrecognized error code");
}

BOOST_AUTO_TEST_CASE(last_error_is_per_thread_and_cleared_only_by_get) {
  BOOST_TEST(cudaSetDevice(7) == cudaErrorInvalidDevice);
  BOOST_TEST(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  BOOST_TEST(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaGetLastError(); }).join();
  BOOST_TEST(other == cudaSuccess);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidDevice);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(work_runs_in_order_and_only_when_synchronised) {
  Stream stream;
  std::vector<int> log;
  for (int i = 1; i <= 3; ++i)
    BOOST_REQUIRE_EQUAL(enqueue(stream.get(), note(log, i)), cudaSuccess);
  BOOST_TEST(log.empty());
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
  BOOST_TEST(log == ints({1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(cudaStreamQuery(stream.get()) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(kernels_run_at_the_sync_with_their_launch_arguments) {
  Stream stream;
  DeviceArray<float> data(100);
  float value = 2.5f;
  ALLOY_LAUNCH(fill_kernel, dim3(4), dim3(32), 0, stream.get())(data.get(), 100, value);
  value = 7.0f;  // arguments are copied at the launch
  BOOST_REQUIRE_EQUAL(cudaGetLastError(), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
  for (float x : data.read())
    BOOST_TEST(x == 2.5f);
  ALLOY_LAUNCH(fill_kernel, dim3(1), dim3(2048), 0, stream.get())(data.get(), 100, value);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
}

BOOST_AUTO_TEST_CASE(event_query_is_not_ready_once_then_done) {
  Stream stream;
  Event event;
  std::vector<int> log;
  BOOST_TEST(cudaEventQuery(event.get()) == cudaSuccess);  // never recorded
  BOOST_REQUIRE_EQUAL(enqueue(stream.get(), note(log, 1)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventRecord(event.get(), stream.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(stream.get(), note(log, 2)), cudaSuccess);
  BOOST_TEST(cudaEventQuery(event.get()) == cudaErrorNotReady);
  BOOST_TEST(cudaGetLastError() == cudaErrorNotReady);
  BOOST_TEST(log == ints({1}), boost::test_tools::per_element());  // ran up to the event only
  BOOST_TEST(cudaEventQuery(event.get()) == cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventSynchronize(event.get()), cudaSuccess);
  BOOST_TEST(log == ints({1}), boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
  BOOST_TEST(log == ints({1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_stream_waits_for_an_event_of_another) {
  Stream producer, consumer;
  Event event;
  std::vector<int> log;
  BOOST_REQUIRE_EQUAL(enqueue(producer.get(), note(log, 1)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventRecord(event.get(), producer.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(producer.get(), note(log, 3)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamWaitEvent(consumer.get(), event.get(), 0), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(consumer.get(), note(log, 2)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(consumer.get()), cudaSuccess);
  BOOST_TEST(log == ints({1, 2}), boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
  BOOST_TEST(log == ints({1, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_legacy_stream_orders_against_blocking_streams_only) {
  Stream blocking(cudaStreamDefault), non_blocking;
  std::vector<int> log;
  BOOST_REQUIRE_EQUAL(enqueue(blocking.get(), note(log, 1)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(non_blocking.get(), note(log, 9)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(nullptr, note(log, 2)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(blocking.get(), note(log, 3)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(blocking.get()), cudaSuccess);
  BOOST_TEST(log == ints({1, 2, 3}), boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(non_blocking.get()), cudaSuccess);
  BOOST_TEST(log == ints({1, 2, 3, 9}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pageable_sources_are_staged_pinned_ones_read_when_the_copy_runs) {
  Stream stream;
  DeviceArray<int> data(2);
  PinnedArray<int> pinned(1);
  PinnedArray<int> back(2);
  std::vector<int> pageable{1};
  pinned[0] = 1;
  BOOST_REQUIRE_EQUAL(cudaMemcpyAsync(data.get(), pageable.data(), sizeof(int),
                                      cudaMemcpyHostToDevice, stream.get()),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaMemcpyAsync(data.get() + 1, pinned.get(), sizeof(int),
                                      cudaMemcpyHostToDevice, stream.get()),
                      cudaSuccess);
  pageable[0] = 2;
  pinned[0] = 2;
  BOOST_REQUIRE_EQUAL(cudaMemcpyAsync(back.get(), data.get(), 2 * sizeof(int),
                                      cudaMemcpyDeviceToHost, stream.get()),
                      cudaSuccess);
  BOOST_TEST(back[0] == -1);  // into pinned memory: not done before a sync; 0xFF bytes
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
  BOOST_TEST(back[0] == 1);
  BOOST_TEST(back[1] == 2);
}

BOOST_AUTO_TEST_CASE(a_copy_into_pageable_memory_completes_before_returning) {
  Stream stream;
  DeviceArray<float> data(4);
  std::vector<int> log;
  BOOST_REQUIRE_EQUAL(cudaMemsetAsync(data.get(), 0, data.bytes(), stream.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(stream.get(), note(log, 1)), cudaSuccess);
  std::vector<float> host(4, 5.0f);
  BOOST_REQUIRE_EQUAL(
      cudaMemcpyAsync(host.data(), data.get(), data.bytes(), cudaMemcpyDeviceToHost, stream.get()),
      cudaSuccess);
  BOOST_TEST(log == ints({1}), boost::test_tools::per_element());
  for (float x : host)
    BOOST_TEST(x == 0.0f);
}

BOOST_AUTO_TEST_CASE(fresh_device_memory_reads_as_all_ones) {
  DeviceArray<float> floats(8);
  for (float x : floats.read())
    BOOST_TEST(std::isnan(x));
  DeviceArray<std::int32_t> integers(3);
  for (std::int32_t x : integers.read())
    BOOST_TEST(x == -1);
}

BOOST_AUTO_TEST_CASE(copies_are_checked_against_the_registries) {
  Stream stream;
  DeviceArray<float> data(16);
  std::vector<float> host(32);
  const std::size_t bytes = data.bytes();
  // Wrong direction for the pointers given.
  BOOST_TEST(cudaMemcpyAsync(host.data(), host.data() + 16, bytes, cudaMemcpyHostToDevice,
                             stream.get()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemcpyAsync(data.get(), host.data(), bytes, cudaMemcpyDeviceToHost,
                             stream.get()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemcpy(data.get(), data.get(), bytes, cudaMemcpyHostToHost) ==
             cudaErrorInvalidValue);
  // Past the allocation's end.
  BOOST_TEST(cudaMemcpyAsync(host.data(), data.get() + 8, bytes, cudaMemcpyDeviceToHost,
                             stream.get()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemsetAsync(data.get() + 1, 0, bytes, stream.get()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemsetAsync(host.data(), 0, 4, stream.get()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemcpyAsync(data.get(), host.data(), bytes, static_cast<cudaMemcpyKind>(9),
                             stream.get()) == cudaErrorInvalidMemcpyDirection);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
  // Inferred directions are fine; so is a copy of nothing.
  BOOST_TEST(cudaMemcpyAsync(data.get(), host.data(), bytes, cudaMemcpyDefault, stream.get()) ==
             cudaSuccess);
  BOOST_TEST(cudaMemcpyAsync(nullptr, nullptr, 0, cudaMemcpyDeviceToHost, stream.get()) ==
             cudaSuccess);
  // Only live allocation starts can be freed.
  BOOST_TEST(cudaFree(data.get() + 1) == cudaErrorInvalidValue);
  BOOST_TEST(cudaFree(host.data()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaFreeHost(host.data()) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(host.data())) ==
             cudaErrorInvalidResourceHandle);
}

BOOST_AUTO_TEST_CASE(device_ranges) {
  DeviceArray<char> data(100);
  BOOST_TEST(alloy::emulator::is_device_range(data.get(), 100));
  BOOST_TEST(alloy::emulator::is_device_range(data.get() + 100, 0));
  BOOST_TEST(!alloy::emulator::is_device_range(data.get() + 1, 100));
  int host = 0;
  BOOST_TEST(!alloy::emulator::is_device_range(&host, 4));
  BOOST_CHECK_THROW(alloy::emulator::require_device_range(&host, 4, "cublasGemmEx's A"),
                    DeviceFault);
  BOOST_REQUIRE_EQUAL(cudaSetDevice(1), cudaSuccess);  // a range of another device is not one
  BOOST_TEST(!alloy::emulator::is_device_range(data.get(), 100));
}

BOOST_AUTO_TEST_CASE(capacity_and_memory_info) {
  std::size_t free_before = 0, total = 0;
  BOOST_REQUIRE_EQUAL(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  BOOST_TEST(total == kCapacity);
  BOOST_TEST(total - free_before == kCapacity / 16);  // the context's share, nothing allocated
  void* big = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(&big, std::size_t{40} << 20), cudaSuccess);
  std::size_t free_after = 0;
  BOOST_REQUIRE_EQUAL(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  BOOST_TEST(free_before - free_after == std::size_t{40} << 20);
  void* too_much = nullptr;
  BOOST_TEST(cudaMalloc(&too_much, free_after + 1) == cudaErrorMemoryAllocation);
  BOOST_TEST(cudaGetLastError() == cudaErrorMemoryAllocation);
  BOOST_REQUIRE_EQUAL(cudaFree(big), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  BOOST_TEST(free_after == free_before);
  void* nothing = &big;
  BOOST_REQUIRE_EQUAL(cudaMalloc(&nothing, 0), cudaSuccess);
  BOOST_TEST(nothing == nullptr);
}

BOOST_AUTO_TEST_CASE(free_waits_for_queued_work) {
  Stream stream;
  std::vector<int> log;
  void* memory = nullptr;
  BOOST_REQUIRE_EQUAL(cudaMalloc(&memory, 64), cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(stream.get(), note(log, 1)), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaFree(memory), cudaSuccess);
  BOOST_TEST(log == ints({1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(elapsed_time_between_executed_records) {
  Stream stream;
  Event start(cudaEventDefault), end(cudaEventDefault), untimed;
  BOOST_REQUIRE_EQUAL(cudaEventRecord(start.get(), stream.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(
      enqueue(stream.get(),
              Work{"sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }}),
      cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventRecord(end.get(), stream.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventRecord(untimed.get(), stream.get()), cudaSuccess);
  float ms = 0;
  BOOST_TEST(cudaEventElapsedTime(&ms, start.get(), end.get()) == cudaErrorNotReady);
  BOOST_REQUIRE_EQUAL(cudaEventSynchronize(end.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventElapsedTime(&ms, start.get(), end.get()), cudaSuccess);
  BOOST_TEST(ms >= 5.0f);
  BOOST_TEST(cudaEventElapsedTime(&ms, start.get(), untimed.get()) ==
             cudaErrorInvalidResourceHandle);
}

BOOST_AUTO_TEST_CASE(host_functions_and_other_threads) {
  Stream stream;
  Event event;
  static int calls = 0;
  calls = 0;
  BOOST_REQUIRE_EQUAL(cudaLaunchHostFunc(
                          stream.get(), [](void* data) { ++*static_cast<int*>(data); }, &calls),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaEventRecord(event.get(), stream.get()), cudaSuccess);
  BOOST_TEST(calls == 0);
  // A writer thread waits on the event, as the async checkpoint writer does.
  cudaError_t waited = cudaErrorUnknown;
  std::thread([&] { waited = cudaEventSynchronize(event.get()); }).join();
  BOOST_TEST(waited == cudaSuccess);
  BOOST_TEST(calls == 1);
}

BOOST_AUTO_TEST_CASE(peer_copies_between_devices) {
  Stream stream;
  DeviceArray<int> source(4);
  BOOST_REQUIRE_EQUAL(cudaMemsetAsync(source.get(), 0, source.bytes(), stream.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaSetDevice(1), cudaSuccess);
  {
    DeviceArray<int> destination(4);
    BOOST_TEST(cudaMemcpyPeerAsync(destination.get(), 0, source.get(), 0, source.bytes(),
                                   nullptr) == cudaErrorInvalidValue);
    BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
    BOOST_REQUIRE_EQUAL(
        cudaMemcpyPeerAsync(destination.get(), 1, source.get(), 0, source.bytes(), nullptr),
        cudaSuccess);
    for (int x : destination.read())
      BOOST_TEST(x == 0);
  }
  BOOST_REQUIRE_EQUAL(cudaSetDevice(0), cudaSuccess);
  static_cast<void>(cudaGetLastError());
}

BOOST_AUTO_TEST_CASE(graph_capture_records_work_and_replays_it) {
  Stream stream;
  DeviceArray<float> data(64);
  PinnedArray<float> host(64);
  std::vector<int> log;
  BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal),
                      cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  BOOST_REQUIRE_EQUAL(cudaStreamIsCapturing(stream.get(), &status), cudaSuccess);
  BOOST_TEST(status == cudaStreamCaptureStatusActive);
  float value = 3.0f;
  BOOST_REQUIRE_EQUAL(enqueue(stream.get(), note(log, 1)), cudaSuccess);
  ALLOY_LAUNCH(fill_kernel, dim3(2), dim3(32), 0, stream.get())(data.get(), 64, value);
  value = 4.0f;
  BOOST_REQUIRE_EQUAL(
      cudaMemcpyAsync(host.get(), data.get(), data.bytes(), cudaMemcpyDeviceToHost, stream.get()),
      cudaSuccess);
  cudaGraph_t graph = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamIsCapturing(stream.get(), &status), cudaSuccess);
  BOOST_TEST(status == cudaStreamCaptureStatusNone);
  std::size_t nodes = 0;
  BOOST_REQUIRE_EQUAL(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  BOOST_TEST(nodes == 3u);
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
  BOOST_TEST(log.empty());  // captured, not run
  for (float x : data.read())
    BOOST_TEST(std::isnan(x));

  cudaGraphExec_t exec = nullptr;
  BOOST_REQUIRE_EQUAL(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaGraphDestroy(graph), cudaSuccess);  // the instance keeps its nodes
  BOOST_REQUIRE_EQUAL(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  BOOST_TEST(log.empty());
  BOOST_REQUIRE_EQUAL(cudaStreamSynchronize(stream.get()), cudaSuccess);
  BOOST_TEST(log == ints({1, 1}), boost::test_tools::per_element());
  for (int i = 0; i < 64; ++i)
    BOOST_TEST(host[static_cast<std::size_t>(i)] == 3.0f);
  BOOST_REQUIRE_EQUAL(cudaGraphExecDestroy(exec), cudaSuccess);
  BOOST_TEST(cudaGraphLaunch(exec, stream.get()) == cudaErrorInvalidValue);
}

BOOST_AUTO_TEST_CASE(an_unsafe_call_during_capture_fails_and_invalidates_it) {
  Stream stream;
  BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal),
                      cudaSuccess);
  void* memory = nullptr;
  BOOST_TEST(cudaMalloc(&memory, 256) == cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  BOOST_REQUIRE_EQUAL(cudaStreamIsCapturing(stream.get(), &status), cudaSuccess);
  BOOST_TEST(status == cudaStreamCaptureStatusInvalidated);
  std::vector<int> log;
  BOOST_TEST(enqueue(stream.get(), note(log, 1)) == cudaErrorStreamCaptureInvalidated);
  cudaGraph_t graph = nullptr;
  BOOST_TEST(cudaStreamEndCapture(stream.get(), &graph) == cudaErrorStreamCaptureInvalidated);
  BOOST_TEST(graph == nullptr);
  static_cast<void>(cudaGetLastError());
  // Capture over, the calls are fine again.
  BOOST_REQUIRE_EQUAL(cudaMalloc(&memory, 256), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaFree(memory), cudaSuccess);
}

BOOST_AUTO_TEST_CASE(synchronising_or_paging_during_a_capture_invalidates_it) {
  Stream stream, other;
  std::vector<float> pageable(4);
  DeviceArray<float> data(4);
  struct Attempt {
    cudaStreamCaptureMode mode;
    std::function<cudaError_t()> call;
  };
  const Attempt attempts[] = {
      // On the capturing stream itself, refused whatever the mode.
      {cudaStreamCaptureModeRelaxed, [&] { return cudaStreamSynchronize(stream.get()); }},
      {cudaStreamCaptureModeRelaxed,
       [&] {
         return cudaMemcpyAsync(data.get(), pageable.data(), data.bytes(), cudaMemcpyHostToDevice,
                                stream.get());
       }},
      // On another stream, refused to the capturing thread unless relaxed.
      {cudaStreamCaptureModeThreadLocal,
       [&] {
         return cudaMemcpyAsync(data.get(), pageable.data(), data.bytes(), cudaMemcpyHostToDevice,
                                other.get());
       }},
      {cudaStreamCaptureModeThreadLocal, [&] { return cudaStreamSynchronize(other.get()); }},
  };
  for (const Attempt& attempt : attempts) {
    BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(stream.get(), attempt.mode), cudaSuccess);
    BOOST_TEST(attempt.call() == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph = nullptr;
    BOOST_TEST(cudaStreamEndCapture(stream.get(), &graph) == cudaErrorStreamCaptureInvalidated);
  }
  static_cast<void>(cudaGetLastError());
}

BOOST_AUTO_TEST_CASE(capture_modes_decide_which_threads_may_make_unsafe_calls) {
  Stream stream;
  void* memory = nullptr;
  const auto malloc_elsewhere = [&] {
    cudaError_t status = cudaErrorUnknown;
    std::thread([&] {
      void* other = nullptr;
      status = cudaMalloc(&other, 256);
      if (status == cudaSuccess) cudaFree(other);
    }).join();
    return status;
  };
  // Thread-local: this thread may not, after relaxing its own mode it may; others may.
  BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal),
                      cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  BOOST_REQUIRE_EQUAL(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  BOOST_TEST(mode == cudaStreamCaptureModeGlobal);
  BOOST_TEST(cudaMalloc(&memory, 256) == cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  BOOST_TEST(mode == cudaStreamCaptureModeRelaxed);
  BOOST_TEST(malloc_elsewhere() == cudaSuccess);
  cudaGraph_t graph = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaGraphDestroy(graph), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaFree(memory), cudaSuccess);
  // Global: another thread in the default (global) mode may not either.
  BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal),
                      cudaSuccess);
  BOOST_TEST(malloc_elsewhere() == cudaErrorStreamCaptureUnsupported);
  BOOST_TEST(cudaStreamEndCapture(stream.get(), &graph) == cudaErrorStreamCaptureInvalidated);
  static_cast<void>(cudaGetLastError());
}

BOOST_AUTO_TEST_CASE(forked_streams_must_join_before_the_capture_ends) {
  Stream origin, side;
  Event forked, joined;
  std::vector<int> log;
  for (const bool join : {false, true}) {
    BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal),
                        cudaSuccess);
    BOOST_REQUIRE_EQUAL(enqueue(origin.get(), note(log, 1)), cudaSuccess);
    BOOST_REQUIRE_EQUAL(cudaEventRecord(forked.get(), origin.get()), cudaSuccess);
    BOOST_REQUIRE_EQUAL(cudaStreamWaitEvent(side.get(), forked.get(), 0), cudaSuccess);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    BOOST_REQUIRE_EQUAL(cudaStreamIsCapturing(side.get(), &status), cudaSuccess);
    BOOST_TEST(status == cudaStreamCaptureStatusActive);
    BOOST_REQUIRE_EQUAL(enqueue(side.get(), note(log, 2)), cudaSuccess);
    BOOST_TEST(cudaEventQuery(forked.get()) == cudaErrorCapturedEvent);
    if (join) {
      BOOST_REQUIRE_EQUAL(cudaEventRecord(joined.get(), side.get()), cudaSuccess);
      BOOST_REQUIRE_EQUAL(cudaStreamWaitEvent(origin.get(), joined.get(), 0), cudaSuccess);
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(origin.get(), &graph);
    BOOST_TEST(ended == (join ? cudaSuccess : cudaErrorStreamCaptureUnjoined));
    BOOST_REQUIRE_EQUAL(cudaStreamIsCapturing(side.get(), &status), cudaSuccess);
    BOOST_TEST(status == cudaStreamCaptureStatusNone);
    if (graph != nullptr) {
      std::size_t nodes = 0;
      BOOST_REQUIRE_EQUAL(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
      BOOST_TEST(nodes == 2u);
      BOOST_REQUIRE_EQUAL(cudaGraphDestroy(graph), cudaSuccess);
    }
  }
  BOOST_TEST(log.empty());
  static_cast<void>(cudaGetLastError());
}

BOOST_AUTO_TEST_CASE(a_fault_loses_the_device_for_good) {
  BOOST_REQUIRE_EQUAL(cudaSetDevice(2), cudaSuccess);
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> log;
  BOOST_REQUIRE_EQUAL(enqueue(stream, Work{"cublasGemmEx",
                                           [] {
                                             throw DeviceFault(
                                                 "cublasGemmEx: A is not device memory",
                                                 cudaErrorIllegalAddress);
                                           }}),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(enqueue(stream, note(log, 1)), cudaSuccess);
  BOOST_TEST(cudaStreamSynchronize(stream) == cudaErrorIllegalAddress);
  BOOST_TEST(log.empty());  // the work after the fault never runs
  void* memory = nullptr;
  BOOST_TEST(cudaMalloc(&memory, 16) == cudaErrorIllegalAddress);
  BOOST_TEST(enqueue(stream, note(log, 2)) == cudaErrorIllegalAddress);
  BOOST_TEST(cudaGetLastError() == cudaErrorIllegalAddress);
  BOOST_TEST(cudaGetLastError() == cudaErrorIllegalAddress);  // sticky
  BOOST_TEST(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  // Other devices are unaffected.
  BOOST_REQUIRE_EQUAL(cudaSetDevice(0), cudaSuccess);
  static_cast<void>(cudaGetLastError());
  BOOST_TEST(cudaDeviceSynchronize() == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(the_host_touching_device_memory_aborts_with_where) {
  const auto [status, output] = in_child([] {
    float* data = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&data), 100) != cudaSuccess) return;
    std::printf("%f\n", static_cast<double>(data[3]));
  });
  BOOST_TEST(aborted(status));
  BOOST_TEST(output.find("alloy CUDA emulator: host code touched device memory at 0x") !=
                 std::string::npos,
             output);
  BOOST_TEST(
      output.find(", 12 bytes into an allocation of 100 bytes on device 0") != std::string::npos,
      output);
}

BOOST_AUTO_TEST_CASE(host_functions_run_with_device_memory_protected) {
  const auto [status, output] = in_child([] {
    static float* data = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&data), 64) != cudaSuccess) return;
    cudaLaunchHostFunc(
        nullptr, [](void*) { std::printf("%f\n", static_cast<double>(data[0])); }, nullptr);
    cudaDeviceSynchronize();
  });
  BOOST_TEST(aborted(status));
  BOOST_TEST(output.find("host code touched device memory") != std::string::npos, output);
}

BOOST_AUTO_TEST_CASE(an_overrun_hits_the_guard_page) {
  const auto [status, output] = in_child([] {
    char* data = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&data), 256) != cudaSuccess) return;
    enqueue(nullptr, Work{"overrun", [data] { data[256 + 8] = 1; }});
    cudaDeviceSynchronize();
  });
  BOOST_TEST(aborted(status));
  BOOST_TEST(output.find("8 bytes past the end of an allocation of 256 bytes on device 0 "
                         "(kernel or library overrun)") != std::string::npos,
             output);
}

BOOST_AUTO_TEST_SUITE_END()
