#include "core/checkpoint/safetensors.h"

#include <unistd.h>

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"
#include "tests/core/checkpoint/sample_state.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::checkpoint;
using alloy::test::TempDir;
namespace pt = boost::property_tree;

namespace {

NamedTensor f32_tensor(const std::string& name, const Shape& shape,
                       const std::vector<float>& values) {
  NamedTensor tensor{name, DType::f32, shape, std::vector<unsigned char>(values.size() * 4)};
  std::memcpy(tensor.data.data(), values.data(), tensor.data.size());
  return tensor;
}

// A small model's weights, with values and a name that stress the format's corners.
CheckpointState exportable_state() {
  CheckpointState state = checkpoint::test::sample_state(1234, 16);
  const float inf = std::numeric_limits<float>::infinity();
  state.parameters = {
      f32_tensor("conv1.weight", {2, 1, 2, 2},
                 {0.5f, -0.0f, 1e-40f, 3.4e38f, -1.25f, inf, 7.0f, 0.1f}),
      f32_tensor("conv1.bias", {2}, {-inf, 2.5e-8f}),
      f32_tensor("odd \"name\" \\ here", {1}, {42.0f}),
      f32_tensor("scalar", {}, {-3.0f}),
  };
  NamedTensor count{"bn.num_batches_tracked", DType::i32, {1}, std::vector<unsigned char>(4)};
  const std::int32_t batches = -123456;
  std::memcpy(count.data.data(), &batches, 4);
  state.buffers = {f32_tensor("bn.running_mean", {3}, {0.25f, -0.5f, 1.0f}), count};
  return state;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<const NamedTensor*> exported_tensors(const CheckpointState& state) {
  std::vector<const NamedTensor*> tensors;
  for (const auto& tensor : state.parameters)
    tensors.push_back(&tensor);
  for (const auto& tensor : state.buffers)
    tensors.push_back(&tensor);
  return tensors;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator))
    parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

std::string shape_text(const Shape& shape) {
  std::string text;
  for (std::size_t i = 0; i < shape.size(); ++i)
    text += (i ? "," : "") + std::to_string(shape[i]);
  return text;
}

// A python3 that can import numpy: the first on PATH, then the system's.
std::string find_python_with_numpy(std::string& tried) {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("PATH")) {
    for (const auto& dir : split(path, ':')) {
      if (!dir.empty()) candidates.push_back(dir + "/python3");
    }
  }
  candidates.push_back("/usr/bin/python3");
  for (const auto& candidate : candidates) {
    if (::access(candidate.c_str(), X_OK) != 0) continue;
    tried += " " + candidate;
    if (alloy::test::run_process(candidate, {"-c", "import numpy"}).exit_code == 0) {
      return candidate;
    }
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(the_file_parses_back_to_the_same_names_shapes_and_bytes) {
  TempDir dir;
  const CheckpointState state = exportable_state();
  const std::string path = dir.file("model.safetensors");
  export_safetensors(state, path);

  const std::string file = read_bytes(path);
  BOOST_TEST_REQUIRE(file.size() >= 8u);
  std::uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) {
    header_bytes |= static_cast<std::uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  }
  BOOST_TEST(header_bytes % 8 == 0u);
  BOOST_TEST_REQUIRE(8 + header_bytes <= file.size());
  BOOST_TEST(file[8] == '{');
  const std::string data = file.substr(8 + header_bytes);

  pt::ptree header;
  std::istringstream json(file.substr(8, header_bytes));
  pt::read_json(json, header);
  const pt::ptree& metadata = header.get_child("__metadata__");
  BOOST_TEST(metadata.get<std::string>("format") == "pt");
  BOOST_TEST(metadata.get<std::string>("model") == "lenet");
  BOOST_TEST(metadata.get<std::string>("step") == "1234");
  BOOST_TEST(metadata.get<std::string>("params_digest") == state.params_digest);

  const auto tensors = exported_tensors(state);
  BOOST_TEST(header.size() == tensors.size() + 1);  // no optimizer state
  std::uint64_t covered = 0;
  for (const NamedTensor* tensor : tensors) {
    BOOST_TEST_CONTEXT("tensor " << tensor->name) {
      const auto entry = header.find(tensor->name);  // find(): names hold dots
      BOOST_TEST_REQUIRE((entry != header.not_found()));
      const pt::ptree& info = entry->second;
      BOOST_TEST(info.get<std::string>("dtype") == safetensors_dtype(tensor->dtype));
      Shape shape;
      for (const auto& extent : info.get_child("shape")) {
        shape.push_back(extent.second.get_value<std::int64_t>());
      }
      BOOST_TEST(shape == tensor->shape);
      std::vector<std::uint64_t> offsets;
      for (const auto& offset : info.get_child("data_offsets")) {
        offsets.push_back(offset.second.get_value<std::uint64_t>());
      }
      BOOST_TEST_REQUIRE(offsets.size() == 2u);
      BOOST_TEST_REQUIRE(offsets[1] <= data.size());
      BOOST_TEST(offsets[1] - offsets[0] == tensor->data.size());
      BOOST_TEST(std::memcmp(data.data() + offsets[0], tensor->data.data(), tensor->data.size()) ==
                 0);
      covered += offsets[1] - offsets[0];
    }
  }
  BOOST_TEST(covered == data.size());
}

BOOST_AUTO_TEST_CASE(numpy_reads_the_same_names_shapes_and_values) {
  std::string tried;
  const std::string python = find_python_with_numpy(tried);
  if (python.empty()) {
    BOOST_FAIL("no python3 with numpy to read the export back (tried:"
               << tried << "); install python3-numpy");
  }
  TempDir dir;
  const CheckpointState state = exportable_state();
  const std::string path = dir.file("model.safetensors");
  export_safetensors(state, path);

  const auto result = alloy::test::run_process(
      python, {std::string(ALLOY_SOURCE_DIR) + "/tools/read_safetensors.py", path});
  BOOST_TEST_REQUIRE(result.exit_code == 0, "reader failed: " << result.errors);
  std::vector<std::string> lines = split(result.output, '\n');
  while (!lines.empty() && lines.back().empty())
    lines.pop_back();
  const auto tensors = exported_tensors(state);
  BOOST_TEST_REQUIRE(lines.size() == tensors.size() + 1, result.output);

  pt::ptree metadata;
  std::istringstream metadata_json(lines[0]);
  pt::read_json(metadata_json, metadata);
  BOOST_TEST(metadata.get<std::string>("format") == "pt");
  BOOST_TEST(metadata.get<std::string>("model") == "lenet");

  std::map<std::string, std::vector<std::string>> read_back;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = split(lines[i], '\t');
    BOOST_TEST_REQUIRE(fields.size() == 4u, lines[i]);
    read_back[fields[0]] = fields;
  }
  for (const NamedTensor* tensor : tensors) {
    BOOST_TEST_CONTEXT("tensor " << tensor->name) {
      const auto found = read_back.find(tensor->name);
      BOOST_TEST_REQUIRE((found != read_back.end()));
      const std::vector<std::string>& fields = found->second;
      BOOST_TEST(fields[1] == safetensors_dtype(tensor->dtype));
      BOOST_TEST(fields[2] == shape_text(tensor->shape));
      const std::vector<std::string> values = split(fields[3], ',');
      BOOST_TEST_REQUIRE(static_cast<std::int64_t>(values.size()) == tensor->numel());
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (tensor->dtype == DType::f32) {
          float expected;
          std::memcpy(&expected, tensor->data.data() + 4 * i, 4);
          const float got = static_cast<float>(std::strtod(values[i].c_str(), nullptr));
          // Bitwise, so -0.0 and the infinities count.
          BOOST_TEST(std::memcmp(&got, &expected, 4) == 0,
                     "value " << i << ": numpy read " << values[i] << ", saved " << expected);
        } else {
          std::int32_t expected;
          std::memcpy(&expected, tensor->data.data() + 4 * i, 4);
          BOOST_TEST(std::stoll(values[i]) == expected);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_name_used_twice_or_a_missing_directory_is_an_error) {
  TempDir dir;
  CheckpointState state = exportable_state();
  state.buffers.push_back(state.parameters[0]);
  try {
    export_safetensors(state, dir.file("twice.safetensors"));
    BOOST_ERROR("a duplicate name was exported");
  } catch (const Error& error) {
    BOOST_TEST(std::string(error.what()).find("conv1.weight appears twice") != std::string::npos,
               error.what());
  }
  const std::string missing = dir.file("absent/model.safetensors");
  try {
    export_safetensors(exportable_state(), missing);
    BOOST_ERROR("an export into a missing directory succeeded");
  } catch (const Error& error) {
    BOOST_TEST(std::string(error.what()).find(missing) != std::string::npos, error.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()
