// The command line's contract on bad input: every mistake gives exactly one line "alloy: error:
// ..." on stderr that names the problem, and exit status 2 for a usage error or 1 for anything
// else; never a crash, an abort or a stack trace. Also --help, --version and --config.
//
// Each case runs the real `alloy` binary. Cases with data use small IDX files written here (a
// few dozen 28x28 images), so the file stays fast; a good copy of the same files trains
// successfully, which shows each failure comes from the one thing broken in it.
#include <zlib.h>

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "tests/support/process.h"

using namespace alloy::test;
namespace fs = std::filesystem;

namespace {

constexpr int kUsage = 2;
constexpr int kFailure = 1;

// `result` is a clean failure with `status`: one error line on stderr holding every one of
// `needles`, nothing that looks like a crash, and nothing on stdout but (at most) a summary.
void check_error(const ProcessResult& result, int status, const std::vector<std::string>& needles) {
  BOOST_TEST(result.exit_code == status,
             "exit " << result.exit_code << "; stderr: " << result.errors);
  const std::vector<std::string> reports = alloy_error_lines(result.errors);
  const std::string error_line = reports.empty() ? "" : reports.back();
  BOOST_TEST(reports.size() == 1u, "stderr: " << result.errors);
  for (const std::string& needle : needles) {
    BOOST_TEST(error_line.find(needle) != std::string::npos,
               "error line '" << error_line << "' does not mention '" << needle << "'");
  }
  for (const char* crash : {"terminate called", "Aborted", "Segmentation", "what():", "#0 "}) {
    BOOST_TEST(result.errors.find(crash) == std::string::npos, "stderr: " << result.errors);
  }
  BOOST_TEST(result.output.find("\"event\":\"end\"") == std::string::npos, result.output);
}

ProcessResult train(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  return run_alloy(args);
}

// --- small IDX data sets ------------------------------------------------------------------

using Bytes = std::vector<std::uint8_t>;

void append_u32(Bytes& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8)
    bytes.push_back((value >> shift) & 0xff);
}

Bytes images_file(std::uint32_t count, std::uint32_t rows = 28, std::uint32_t cols = 28,
                  std::uint32_t magic = 0x00000803) {
  Bytes bytes;
  append_u32(bytes, magic);
  for (const std::uint32_t dim : {count, rows, cols})
    append_u32(bytes, dim);
  for (std::uint32_t i = 0; i < count * rows * cols; ++i) {
    bytes.push_back(static_cast<std::uint8_t>((i * 37 + i / 784 * 11) % 256));
  }
  return bytes;
}

Bytes labels_file(std::uint32_t count, std::uint8_t largest = 9) {
  Bytes bytes;
  append_u32(bytes, 0x00000801);
  append_u32(bytes, count);
  for (std::uint32_t i = 0; i < count; ++i)
    bytes.push_back(static_cast<std::uint8_t>(i % (largest + 1)));
  return bytes;
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  BOOST_REQUIRE_MESSAGE(out.good(), "cannot write " << path);
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  BOOST_REQUIRE_MESSAGE(file != nullptr, "cannot write " << path);
  const int written = gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
  BOOST_REQUIRE(written == static_cast<int>(bytes.size()));
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

constexpr std::uint32_t kTrain = 64;
constexpr std::uint32_t kTest = 32;

// A directory with the four files of a good, tiny, uncompressed data set.
struct DataDir {
  TempDir dir;
  DataDir() {
    write_file(dir.file("train-images-idx3-ubyte"), images_file(kTrain));
    write_file(dir.file("train-labels-idx1-ubyte"), labels_file(kTrain));
    write_file(dir.file("t10k-images-idx3-ubyte"), images_file(kTest));
    write_file(dir.file("t10k-labels-idx1-ubyte"), labels_file(kTest));
  }
  std::string path() const { return dir.path(); }
  std::string file(const std::string& name) const { return dir.file(name); }
};

// A one-epoch run on `data`: the model that trains fastest, a batch that fits.
ProcessResult train_on(const std::string& data_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--data-dir", data_dir, "--device",     "cpu", "--threads", "1",
                                   "--epochs",   "1",      "--batch-size", "16"};
  args.insert(args.end(), extra.begin(), extra.end());
  return train(args);
}

std::string write_config(const TempDir& dir, const std::string& text) {
  const std::string path = dir.file("run.cfg");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

// --- usage errors: exit 2, the message names the flag ------------------------------------

BOOST_AUTO_TEST_SUITE(usage_errors)

BOOST_AUTO_TEST_CASE(unknown_flag) {
  check_error(train({"--learning-rate", "0.1"}), kUsage, {"--learning-rate"});
  check_error(train({"--bogus"}), kUsage, {"--bogus"});
}

BOOST_AUTO_TEST_CASE(missing_value) {
  check_error(train({"--lr"}), kUsage, {"--lr", "missing"});
  check_error(train({"--epochs", "2", "--batch-size"}), kUsage, {"--batch-size", "missing"});
}

BOOST_AUTO_TEST_CASE(batch_size_zero_or_negative) {
  check_error(train({"--batch-size", "0"}), kUsage, {"--batch-size", "0"});
  check_error(train({"--batch-size", "-4"}), kUsage, {"--batch-size", "-4"});
  check_error(train({"--batch-size=-1"}), kUsage, {"--batch-size"});
}

BOOST_AUTO_TEST_CASE(numbers_that_are_not) {
  check_error(train({"--lr", "abc"}), kUsage, {"--lr", "abc"});
  check_error(train({"--lr", "nan"}), kUsage, {"--lr"});
  check_error(train({"--lr", "-0.1"}), kUsage, {"--lr"});
  check_error(train({"--epochs", "1.5"}), kUsage, {"--epochs", "1.5"});
  check_error(train({"--epochs", "0"}), kUsage, {"--epochs"});
  check_error(train({"--batch-size", "99999999999999999999999"}), kUsage, {"--batch-size"});
  check_error(train({"--threads", "0"}), kUsage, {"--threads"});
  check_error(train({"--seed", "x"}), kUsage, {"--seed"});
}

BOOST_AUTO_TEST_CASE(unknown_choices) {
  check_error(train({"--model", "vgg16"}), kUsage, {"--model", "vgg16", "lenet"});
  check_error(train({"--opt-level", "O4"}), kUsage, {"--opt-level", "O4"});
  check_error(train({"--opt-level", "00"}), kUsage, {"--opt-level", "00"});
  check_error(train({"--dataset", "imagenet"}), kUsage, {"--dataset", "imagenet"});
  check_error(train({"--device", "tpu"}), kUsage, {"--device", "tpu"});
  check_error(train({"--optimizer", "lion"}), kUsage, {"--optimizer", "lion"});
  check_error(train({"--half-dtype", "fp8"}), kUsage, {"--half-dtype", "fp8"});
}

BOOST_AUTO_TEST_CASE(stray_words_and_commands) {
  check_error(train({"lenet"}), kUsage, {"lenet"});
  check_error(run_alloy({"fit"}), kUsage, {"fit"});
  const ProcessResult bare = run_alloy({});
  BOOST_TEST(bare.exit_code == kUsage);
  BOOST_TEST(bare.errors.find("Usage: alloy") != std::string::npos, bare.errors);
}

// Data parallelism on GPUs: the launcher answers before it starts any worker.
BOOST_AUTO_TEST_CASE(dist_backend_and_device) {
  check_error(train({"--dist-backend", "mpi"}), kUsage, {"--dist-backend 'mpi'", "nccl or gloo"});
  check_error(train({"--dist-backend", "nccl", "--device", "cpu"}), kUsage,
              {"--dist-backend nccl reduces GPU tensors", "--device cpu", "--dist-backend gloo"});
  check_error(train({"--dist-backend", "nccl", "--device", "cuda:0", "--gpus", "2"}), kUsage,
              {"NCCL does not support two ranks on one device (cuda:0)", "--dist-backend gloo"});
  check_error(train({"--device", "cuda:1", "--gpus", "2"}), kUsage,
              {"NCCL does not support two ranks on one device (cuda:1)", "default"});
}

BOOST_AUTO_TEST_SUITE_END()

// --- no usable GPU: exit 1, the launcher says why before starting any worker --------------

BOOST_AUTO_TEST_SUITE(no_gpu)

BOOST_AUTO_TEST_CASE(cuda_without_a_usable_device) {
  std::string reason;
  if (alloy::cuda_available(&reason)) {
    BOOST_TEST_MESSAGE("this machine has a usable CUDA device: nothing to check here");
    return;
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--device", "cuda", "--gpus", "2"},
        {"--device", "cuda:0", "--dist-backend", "gloo", "--gpus", "2"},
        {"--device", "cuda"}}) {
    const ProcessResult result = train(args);
    check_error(result, kFailure, {"no usable CUDA device: " + reason});
    BOOST_TEST(result.errors.find("not available yet") == std::string::npos, result.errors);
  }
  // --device auto falls back to the CPU, where NCCL cannot reduce.
  check_error(train({"--dist-backend", "nccl", "--gpus", "2"}), kFailure,
              {"--dist-backend nccl reduces GPU tensors, but this run is on the CPU",
               "no usable CUDA device"});
}

BOOST_AUTO_TEST_SUITE_END()

// --- data errors: exit 1, the message names the file and the problem ----------------------

BOOST_AUTO_TEST_SUITE(data_errors)

BOOST_AUTO_TEST_CASE(good_files_train) {
  // The control: the same files, undamaged, train and evaluate.
  DataDir data;
  const ProcessResult result = train_on(data.path(), {"--model", "mlp", "--log-json", "-"});
  BOOST_TEST_REQUIRE(result.exit_code == 0, result.errors);
  BOOST_TEST(result.output.find("\"event\":\"end\"") != std::string::npos, result.output);
  BOOST_TEST(result.errors.find("alloy: error") == std::string::npos, result.errors);
}

BOOST_AUTO_TEST_CASE(missing_data_directory) {
  TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  check_error(train_on(missing), kFailure, {missing, "does not exist"});
  check_error(train_on(dir.file("")), kFailure, {"not found"});  // exists, holds no files
  write_file(dir.file("a-file"), {1, 2, 3});
  check_error(train_on(dir.file("a-file")), kFailure, {dir.file("a-file"), "not a directory"});
}

BOOST_AUTO_TEST_CASE(missing_file) {
  DataDir data;
  fs::remove(data.file("t10k-labels-idx1-ubyte"));
  check_error(train_on(data.path()), kFailure, {"t10k-labels-idx1-ubyte", "not found"});
}

BOOST_AUTO_TEST_CASE(truncated_idx) {
  DataDir data;
  const std::string path = data.file("train-images-idx3-ubyte");
  Bytes bytes = read_file(path);
  bytes.resize(bytes.size() - 100);
  write_file(path, bytes);
  check_error(train_on(data.path()), kFailure, {path, "truncated"});

  bytes.resize(6);  // inside the header
  write_file(path, bytes);
  check_error(train_on(data.path()), kFailure, {path, "truncated"});

  write_file(path, {});
  check_error(train_on(data.path()), kFailure, {path, "truncated"});
}

BOOST_AUTO_TEST_CASE(truncated_gzip) {
  DataDir data;
  const std::string plain = data.file("train-images-idx3-ubyte");
  const std::string zipped = plain + ".gz";
  write_gzip(zipped, read_file(plain));
  fs::remove(plain);
  // The whole .gz file reads (the reader picks .gz when the plain file is absent) ...
  const ProcessResult good = train_on(data.path(), {"--model", "mlp"});
  BOOST_TEST_REQUIRE(good.exit_code == 0, good.errors);
  // ... and a cut one does not.
  Bytes bytes = read_file(zipped);
  bytes.resize(bytes.size() / 2);
  write_file(zipped, bytes);
  check_error(train_on(data.path()), kFailure, {zipped, "truncated"});
}

BOOST_AUTO_TEST_CASE(bad_magic) {
  DataDir data;
  const std::string images = data.file("t10k-images-idx3-ubyte");
  write_file(images, images_file(kTest, 28, 28, 0x00000903));
  check_error(train_on(data.path()), kFailure, {images, "magic"});

  // A labels file where the images file belongs.
  write_file(images, labels_file(kTest));
  check_error(train_on(data.path()), kFailure, {images});

  const std::string labels = data.file("train-labels-idx1-ubyte");
  write_file(images, images_file(kTest));
  write_file(labels, {'P', 'K', 3, 4, 0, 0, 0, 0});  // a zip file, say
  check_error(train_on(data.path()), kFailure, {labels, "magic"});
}

BOOST_AUTO_TEST_CASE(images_and_labels_of_different_counts) {
  DataDir data;
  write_file(data.file("train-labels-idx1-ubyte"), labels_file(kTrain - 1));
  check_error(train_on(data.path()), kFailure,
              {"train-labels-idx1-ubyte", std::to_string(kTrain - 1), std::to_string(kTrain)});
}

BOOST_AUTO_TEST_CASE(labels_out_of_range) {
  DataDir data;
  write_file(data.file("t10k-labels-idx1-ubyte"), labels_file(kTest, 10));  // labels 0..10
  check_error(train_on(data.path()), kFailure, {"t10k-labels-idx1-ubyte", "label 10"});
}

BOOST_AUTO_TEST_CASE(images_of_another_size) {
  DataDir data;
  write_file(data.file("train-images-idx3-ubyte"), images_file(kTrain, 14, 14));
  check_error(train_on(data.path()), kFailure, {"14x14", "28x28"});
}

BOOST_AUTO_TEST_CASE(batch_larger_than_training_set) {
  DataDir data;
  const std::string too_big = std::to_string(kTrain + 1);
  check_error(train({"--data-dir", data.path(), "--threads", "1", "--batch-size", too_big}), kUsage,
              {"--batch-size", too_big, std::to_string(kTrain)});
}

BOOST_AUTO_TEST_CASE(unwritable_json_log) {
  DataDir data;
  const std::string log = data.file("no-such-dir/log.json");
  check_error(train_on(data.path(), {"--log-json", log}), kFailure, {log});
}

BOOST_AUTO_TEST_SUITE_END()

// --- --config -----------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(config_file)

BOOST_AUTO_TEST_CASE(unknown_key) {
  TempDir dir;
  const std::string path = write_config(dir, "# a run\nepochs 1\nlearning_rate 0.1\n");
  check_error(train({"--config", path}), kUsage, {path + ":3", "learning_rate"});
}

BOOST_AUTO_TEST_CASE(missing_file) {
  TempDir dir;
  const std::string path = dir.file("absent.cfg");
  check_error(train({"--config", path}), kFailure, {path});
  check_error(train({"--config", dir.path()}), kFailure, {dir.path()});  // a directory
}

BOOST_AUTO_TEST_CASE(bad_lines) {
  TempDir dir;
  std::string path = write_config(dir, "lr\n");
  check_error(train({"--config", path}), kUsage, {path + ":1", "--lr"});
  path = write_config(dir, "epochs 1\nlr = fast\n");
  check_error(train({"--config", path}), kUsage, {path + ":2", "--lr", "fast"});
  path = write_config(dir, "epochs 1\nepochs 2\n");
  check_error(train({"--config", path}), kUsage, {path + ":2", "epochs"});
  path = write_config(dir, "config other.cfg\n");
  check_error(train({"--config", path}), kUsage, {path + ":1", "config"});
  path = write_config(dir, "batch-size 0\n");
  check_error(train({"--config", path}), kUsage, {"--batch-size"});
}

BOOST_AUTO_TEST_CASE(values_apply_and_the_command_line_wins) {
  TempDir dir;
  // The config's data directory is used: the run fails on it, naming it.
  const std::string missing = dir.file("config-data");
  std::string path = write_config(dir, "--data-dir=" + missing + "\nbatch-size 0  # too small\n");
  check_error(train({"--config", path, "--batch-size", "8"}), kFailure, {missing});
  // With the command line's data directory, the config's invalid batch size is overridden and
  // a tiny run succeeds.
  DataDir data;
  const ProcessResult result =
      train({"--config", path, "--batch-size", "16", "--data-dir", data.path(), "--model", "mlp",
             "--epochs", "1", "--threads", "1", "--log-json", "-"});
  BOOST_TEST(result.exit_code == 0, result.errors);
  BOOST_TEST(result.output.find("\"batch_size\":16") != std::string::npos, result.output);
}

BOOST_AUTO_TEST_SUITE_END()

// --- --help and --version -----------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(help_and_version)

BOOST_AUTO_TEST_CASE(train_help_lists_every_flag) {
  const ProcessResult result = run_alloy({"train", "--help"});
  BOOST_TEST(result.exit_code == 0, result.errors);
  BOOST_TEST(result.errors.empty(), result.errors);
  // Every flag of `alloy train`'s synopsis.
  for (const char* flag : {"--model",
                           "--dataset",
                           "--data-dir",
                           "--device",
                           "--threads",
                           "--seed",
                           "--opt-level",
                           "--half-dtype",
                           "--loss-scale",
                           "--init-loss-scale",
                           "--scale-window",
                           "--min-loss-scale",
                           "--max-loss-scale",
                           "--keep-batchnorm-fp32",
                           "--master-weights",
                           "--optimizer",
                           "--lr",
                           "--momentum",
                           "--weight-decay",
                           "--epochs",
                           "--batch-size",
                           "--checkpoint-dir",
                           "--checkpoint-every",
                           "--keep-checkpoints",
                           "--resume",
                           "--nodes",
                           "--gpus",
                           "--nproc-per-node",
                           "--nr",
                           "--master-addr",
                           "--master-port",
                           "--allreduce-fp32",
                           "--dist-backend",
                           "--log-json",
                           "--config",
                           "--help"}) {
    BOOST_TEST(result.output.find(std::string(flag) + " ") != std::string::npos,
               "alloy train --help does not document " << flag);
  }
  // -h too, also after other flags.
  const ProcessResult short_form = run_alloy({"train", "--epochs", "3", "-h"});
  BOOST_TEST(short_form.exit_code == 0);
  BOOST_TEST(short_form.output == result.output);
}

BOOST_AUTO_TEST_CASE(other_commands_document_their_flags) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"eval", {"--checkpoint", "--data-dir", "--device", "--log-json"}},
      {"mem",
       {"--model", "--batch-size", "--device", "--opt-levels", "--steps", "--json", "--plot"}},
      {"ckpt", {"info", "verify", "--json"}},
  };
  for (const auto& [command, flags] : commands) {
    const ProcessResult result = run_alloy({command, "--help"});
    BOOST_TEST(result.exit_code == 0, command << ": " << result.errors);
    for (const std::string& flag : flags) {
      BOOST_TEST(result.output.find(flag) != std::string::npos,
                 "alloy " << command << " --help does not document " << flag);
    }
  }
}

BOOST_AUTO_TEST_CASE(top_level_help) {
  for (const char* flag : {"--help", "-h", "help"}) {
    const ProcessResult result = run_alloy({flag});
    BOOST_TEST(result.exit_code == 0, flag);
    for (const char* command : {"train", "eval", "mem", "ckpt"}) {
      BOOST_TEST(result.output.find(std::string("  ") + command) != std::string::npos,
                 "alloy " << flag << " does not list " << command);
    }
  }
}

BOOST_AUTO_TEST_CASE(version) {
  const ProcessResult result = run_alloy({"--version"});
  BOOST_TEST(result.exit_code == 0, result.errors);
  BOOST_TEST(result.output.rfind(std::string("alloy ") + ALLOY_VERSION, 0) == 0, result.output);
  BOOST_TEST(lines_of(result.output).size() == 1u, result.output);
}

BOOST_AUTO_TEST_SUITE_END()
