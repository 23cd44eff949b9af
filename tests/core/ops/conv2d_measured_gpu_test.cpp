// --conv-algorithms measured on the GPU (core/ops/cuda/conv2d.cu, conv2d_algorithm_db.h): the
// first execution of each direction times cuDNN's algorithms and Alloy's direct kernels, runs
// the fastest deterministic one, still computes the convolution (Find's clobbered outputs never
// leak: dw accumulates), and writes the choice to the algorithm db; a shape the db already holds
// runs the db's choice (the direct kernels' too) and measures nothing; the heuristic setting
// never touches the db.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/conv2d.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "core/ops/cuda/conv2d_algorithms.h"
#include "tests/support/gpu.h"
#include "tests/support/process.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d.h"
#endif

using namespace alloy;
using namespace alloy::test;

namespace {

// Which algorithm each direction of every shape settled on ("" in a build without CUDA, whose
// fixture skips the test anyway).
std::string algorithm_report() {
#ifdef ALLOY_HAVE_CUDA
  return cuda::conv2d_algorithm_report(Device::cuda(0));
#else
  return {};
#endif
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  for (std::string field; std::getline(stream, field, '\t');)
    fields.push_back(field);
  return fields;
}

// The db's lines for x's and w's shapes with `stride` and `pad` (f32), by direction.
std::map<std::string, std::vector<std::string>> db_lines(const std::string& db, const Shape& x,
                                                         const Shape& w, int stride, int pad) {
  const auto list = [](const Shape& s) {
    return std::to_string(s[0]) + "," + std::to_string(s[1]) + "," + std::to_string(s[2]) + "," +
           std::to_string(s[3]);
  };
  std::map<std::string, std::vector<std::string>> lines;
  std::stringstream stream(read_file(db));
  for (std::string line; std::getline(stream, line);) {
    const std::vector<std::string> f = fields_of(line);
    if (f.size() == 11 && f[2] == "f32" && f[3] == list(x) && f[4] == list(w) &&
        f[5] == std::to_string(stride) + "," + std::to_string(stride) &&
        f[6] == std::to_string(pad) + "," + std::to_string(pad) && f[7] == "nchw") {
      lines[f[8]] = f;
    }
  }
  return lines;
}

// Forward and backward of an f32 convolution on the GPU, each checked against the CPU; dw and
// db start non-zero, so that an accumulation polluted by a trial or a Find output shows.
void check_convolution(const Shape& xs, const Shape& ws, const Conv2dParams& params,
                       Generator& generator) {
  const Tensor x = random_tensor(xs, DType::f32, generator);
  const Tensor w = random_tensor(ws, DType::f32, generator, -0.2f, 0.2f);
  const Tensor b = random_tensor({ws[0]}, DType::f32, generator);
  const Tensor y = conv2d_forward(x, w, b, params);
  check_gpu_close(conv2d_forward(to_cuda(x), to_cuda(w), to_cuda(b), params), y, "forward", 1e-5,
                  1e-5);
  const Tensor dy = random_tensor(y.shape(), DType::f32, generator);
  Tensor dw = random_tensor(ws, DType::f32, generator);
  Tensor db = random_tensor({ws[0]}, DType::f32, generator);
  Tensor dw_gpu = to_cuda(dw), db_gpu = to_cuda(db);
  const Conv2dGrads cpu = conv2d_backward(x, w, dy, dw, db, params, true);
  const Conv2dGrads gpu =
      conv2d_backward(to_cuda(x), to_cuda(w), to_cuda(dy), dw_gpu, db_gpu, params, true);
  check_gpu_close(dw_gpu, dw, "dw", 1e-5, 1e-4);
  check_gpu_close(db_gpu, db, "db", 1e-5, 1e-4);
  check_gpu_close(gpu.dx, cpu.dx, "dx", 1e-5, 1e-5);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv2d_measured_gpu)

BOOST_AUTO_TEST_CASE(measured_choices_are_kept_in_the_db_and_read_back_without_measuring) {
  TempDir cache;
  setenv("ALLOY_CACHE_DIR", cache.path().c_str(), 1);
  cuda::reset_conv_algorithms();
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::measured);
  const std::string db = cache.file("conv_algorithms.txt");
  Generator generator(73);

  // A new shape: each direction measured once, recorded at once.
  const Shape x = {2, 3, 8, 8}, w = {4, 3, 3, 3};
  check_convolution(x, w, {1, 1, 1, 1}, generator);
  const auto measured = db_lines(db, x, w, 1, 1);
  BOOST_TEST_MESSAGE("db:\n" << read_file(db));
  BOOST_TEST_REQUIRE(measured.size() == 3u);
  const std::vector<std::string>& forward = measured.at("forward");
  const std::string gpu = forward[0], version = forward[1];
  const std::string fma_math = "3";  // CUDNN_FMA_MATH: cuDNN's fp32 algorithms run with it
  const std::string report = algorithm_report();
  BOOST_TEST_MESSAGE("cuDNN algorithms chosen:\n" << report);
  if (gpu == "Alloy CUDA emulator") {
    // Find's (made-up) three fastest qualifying offers and Alloy's direct kernels (100) are
    // timed again for real, and the fastest is kept: forward may keep any of its three
    // algorithms; the backward passes offer one deterministic algorithm each (ALGO_1), the
    // others being non-deterministic. The report names what the db holds.
    const std::map<std::string, std::map<std::string, std::string>> contenders = {
        {"forward",
         {{"0", "IMPLICIT_GEMM (FMA math)"},
          {"1", "IMPLICIT_PRECOMP_GEMM (FMA math)"},
          {"2", "GEMM (FMA math)"}}},
        {"data", {{"1", "ALGO_1 (FMA math)"}}},
        {"filter", {{"1", "ALGO_1 (FMA math)"}}}};
    std::string expected = "f32 x [2, 3, 8, 8] with 4 filters 3x3, stride 1x1, padding 1x1:";
    for (const auto& [direction, reported] :
         {std::pair<std::string, std::string>{"forward", "forward"},
          {"data", "input gradient"},
          {"filter", "filter gradient"}}) {
      const std::string algo = measured.at(direction)[9];
      const std::map<std::string, std::string>& cudnn = contenders.at(direction);
      BOOST_TEST((cudnn.count(algo) == 1 || algo == "100"), direction << " chose " << algo);
      // Which of Alloy's kernels, its math type says.
      const std::string alloy =
          algo == "100" ? cuda::alloy_kernel_name(direction, std::stoi(measured.at(direction)[10]))
                        : "";
      expected += " " + reported + " " +
                  (algo == "100"       ? alloy
                   : cudnn.count(algo) ? cudnn.at(algo)
                                       : "?") +
                  ";";
    }
    BOOST_TEST(report.find(expected) != std::string::npos, report);
  }
  // Running the shape again measures nothing more.
  const std::string after_first = read_file(db);
  check_convolution(x, w, {1, 1, 1, 1}, generator);
  BOOST_TEST(read_file(db) == after_first);

  // A shape the db already holds (as another run left it): its choices run, nothing is measured.
  const Shape x2 = {2, 3, 9, 9};
  const std::string shape = "f32\t2,3,9,9\t4,3,3,3\t2,2\t1,1\tnchw\t";
  const std::string held = gpu + "\t" + version + "\t" + shape + "forward\t0\t" + fma_math + "\n" +
                           gpu + "\t" + version + "\t" + shape + "data\t1\t" + fma_math + "\n" +
                           gpu + "\t" + version + "\t" + shape + "filter\t1\t" + fma_math + "\n";
  std::ofstream(db, std::ios::app) << held;
  cuda::reset_conv_algorithms();  // a new process: the db is read again
  const std::string before = read_file(db);
  check_convolution(x2, w, {2, 2, 1, 1}, generator);
  BOOST_TEST(read_file(db) == before);
  const std::string report2 = algorithm_report();
  BOOST_TEST(report2.find("f32 x [2, 3, 9, 9] with 4 filters 3x3, stride 2x2, padding 1x1: "
                          "forward IMPLICIT_GEMM") != std::string::npos,
             report2);
  BOOST_TEST(cuda::conv_algorithms_in_use() ==
             cuda::format_conv_algorithms(cuda::parse_conv_algorithms(held)));

  // A choice of Alloy's direct kernels (100, math type 0) runs them, in every direction, and
  // they agree with the CPU (the forward with its bias, the filter gradient accumulating).
  // The db lines that choose Alloy's kernels for a shape: the forward's and the filter
  // gradient's by math type, the input gradient's direct kernel.
  const auto alloy_choices = [&](const std::string& shape, int forward, int filter) {
    std::string lines;
    for (const auto& [direction, kernel] :
         {std::pair<const char*, int>{"forward", forward}, {"data", 0}, {"filter", filter}}) {
      lines += gpu + "\t" + version + "\t" + shape + direction + "\t100\t" +
               std::to_string(kernel) + "\n";
    }
    return lines;
  };
  std::ofstream(db, std::ios::app) << alloy_choices("f32\t3,3,7,7\t4,3,3,3\t1,1\t1,1\tnchw\t",
                                                    cuda::kStreamingForward, cuda::kDirectFilter);
  cuda::reset_conv_algorithms();
  const std::string with_direct = read_file(db);
  check_convolution({3, 3, 7, 7}, w, {1, 1, 1, 1}, generator);
  BOOST_TEST(read_file(db) == with_direct);
  const std::string direct = "ALLOY_DIRECT (Alloy's fp32-accumulating kernels);";
  const std::string report3 = algorithm_report();
  BOOST_TEST(
      report3.find("f32 x [3, 3, 7, 7] with 4 filters 3x3, stride 1x1, padding 1x1: forward " +
                   direct + " input gradient " + direct + " filter gradient " + direct) !=
          std::string::npos,
      report3);

  // A choice of the forward's channel-split kernel (100, math type 1) runs it, where it applies
  // (4 channels here), and it agrees with the CPU.
  const Shape w4 = {4, 4, 3, 3};
  std::ofstream(db, std::ios::app) << alloy_choices("f32\t3,4,7,7\t4,4,3,3\t1,1\t1,1\tnchw\t",
                                                    cuda::kSplitForward, cuda::kDirectFilter);
  cuda::reset_conv_algorithms();
  const std::string with_split = read_file(db);
  check_convolution({3, 4, 7, 7}, w4, {1, 1, 1, 1}, generator);
  BOOST_TEST(read_file(db) == with_split);
  const std::string report4 = algorithm_report();
  BOOST_TEST(report4.find("f32 x [3, 4, 7, 7] with 4 filters 3x3, stride 1x1, padding 1x1: "
                          "forward ALLOY_DIRECT (Alloy's fp32-accumulating kernels, channels "
                          "split over warp groups); input gradient " +
                          direct) != std::string::npos,
             report4);

  // A choice of the implicit-GEMM kernels (forward 100 2, filter gradient 100 1) runs them, and
  // they agree with the CPU.
  std::ofstream(db, std::ios::app)
      << alloy_choices("f32\t3,4,6,6\t4,4,3,3\t1,1\t1,1\tnchw\t", cuda::kImplicitGemmForward,
                       cuda::kImplicitGemmFilter);
  cuda::reset_conv_algorithms();
  const std::string with_igemm = read_file(db);
  check_convolution({3, 4, 6, 6}, w4, {1, 1, 1, 1}, generator);
  BOOST_TEST(read_file(db) == with_igemm);
  const std::string report5 = algorithm_report();
  BOOST_TEST(report5.find("f32 x [3, 4, 6, 6] with 4 filters 3x3, stride 1x1, padding 1x1: "
                          "forward ALLOY_DIRECT (Alloy's fp32-accumulating kernels, implicit "
                          "GEMM); input gradient " +
                          direct +
                          " filter gradient ALLOY_DIRECT (Alloy's fp32-accumulating kernels, "
                          "implicit GEMM);") != std::string::npos,
             report5);

  // The heuristic setting neither reads nor writes the db.
  cuda::set_conv_algorithm_choice(cuda::ConvAlgorithmChoice::heuristic);
  check_convolution({2, 3, 10, 10}, w, {1, 1, 1, 1}, generator);
  BOOST_TEST(read_file(db) == with_igemm);
  cuda::reset_conv_algorithms();
  unsetenv("ALLOY_CACHE_DIR");
}

BOOST_AUTO_TEST_SUITE_END()
