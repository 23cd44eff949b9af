// The safetensors reader: export_safetensors's files read back, a hand-built file with the
// JSON the writer never emits, and every kind of damage it must refuse with an alloy::Error
// that names the file and says what is wrong. The damaged files are also the safetensors
// fuzzer's seeds: tools/fuzz/make_corpus.sh writes them to tests/data/safetensors_corpus, which
// the last case replays (with any input the fuzzer once crashed on).
#include "core/checkpoint/safetensors_read.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/error.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::checkpoint;
using alloy::test::TempDir;

namespace {

const std::string kName = "model.safetensors";
const std::string kCorpus = std::string(ALLOY_SOURCE_DIR) + "/tests/data/safetensors_corpus";

std::string le64(std::uint64_t value) {
  std::string bytes;
  for (int i = 0; i < 8; ++i)
    bytes += static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

std::string file_of(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

// Tensor bytes with no '}' in them, so that the fuzzer's re-framing (which ends the header at
// the input's last '}') finds the header's end in these seeds.
std::string data_bytes(std::size_t size) {
  std::string data;
  for (std::size_t i = 0; i < size; ++i)
    data += static_cast<char>('a' + i % 26);
  return data;
}

// A header holding one tensor "w".
std::string one_tensor(const std::string& dtype, const std::string& shape,
                       const std::string& offsets) {
  return R"({"w":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

// Whitespace everywhere JSON allows it, keys in no particular order, metadata last, and names
// and values spelled with escapes: \u in both cases, a surrogate pair, and every short escape.
const std::string kHandBuiltHeader =
    " \t\r\n{ \"w\\u00e9ight\\uD83D\\uDE00\" :\n  { \"data_offsets\" : [ 0 , 8 ] ,\t\"shape\" "
    ": [ 2 ] , \"dtype\" : \"F32\" } ,\r\n  \"b\":{\"shape\":[],\"dtype\":\"I32\","
    "\"data_offsets\":[8,12]},\n  \"__metadata__\" : { \"caf\\u00e9\" : \"smile "
    "\\ud83d\\ude00\" , \"esc\" : \"\\\"\\\\\\/\\b\\f\\n\\r\\t\" }\n} \n";

struct Fault {
  std::string name;    // its file name in the corpus, less ".safetensors"
  std::string file;    // the bytes
  std::string reason;  // what the error message must contain after "safetensors file NAME: "
};

std::vector<Fault> faults() {
  const std::string f32x4 = data_bytes(16);
  return {
      // too short
      {"empty", "", "0 bytes, too short for the header length"},
      {"short-length", std::string("\x02\x00\x00", 3), "3 bytes, too short for the header length"},
      // header length past the file (and one whose 8 + length would wrap)
      {"header-past-the-file", le64(100) + "{}", "header of 100 bytes in a file of 10"},
      {"huge-header-length", le64(std::uint64_t{1} << 63) + "{}",
       "header of 9223372036854775808 bytes in a file of 10"},
      // bad JSON
      {"empty-header", file_of(""), "bad header at byte 0: expected '{'"},
      {"unterminated-string", file_of(R"({"w)"), "bad header at byte 3: unterminated string"},
      {"unterminated-escape", file_of(R"({"w\)"), "bad header at byte 4: unterminated escape"},
      {"control-character", file_of("{\"a\nb\":{}}"),
       "bad header at byte 4: control character in a string"},
      {"bad-escape", file_of(R"({"a\qb":{}})"), "bad header at byte 5: unknown escape '\\q'"},
      {"short-unicode-escape", file_of(R"({"\u12)"), "short \\u escape"},
      {"bad-hex-digit", file_of(R"({"\u12g4":{}})"), "bad hex digit in a \\u escape"},
      {"lone-low-surrogate", file_of(R"({"\udc00":{}})"), "lone low surrogate"},
      {"high-surrogate-alone", file_of(R"({"\ud83dx":{}})"), "high surrogate without its low one"},
      {"high-surrogate-then-not-low", file_of(R"({"\ud83d\u0041":{}})"),
       "high surrogate without its low one"},
      {"trailing-text", file_of("{} x"), "bad header at byte 3: text after the header's object"},
      {"missing-colon", file_of(R"({"w" {}})"), "bad header at byte 5: expected ':'"},
      {"trailing-comma",
       file_of(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},})", f32x4),
       "expected '\"'"},
      {"missing-close", file_of(R"({"__metadata__":{})"), "expected '}'"},
      {"tensor-not-an-object", file_of(R"({"w":1})"), "bad header at byte 5: expected '{'"},
      {"metadata-not-a-string", file_of(R"({"__metadata__":{"a":1}})"), "expected '\"'"},
      {"negative-extent", file_of(one_tensor("F32", "[-4]", "[0,16]"), f32x4),
       "expected a non-negative integer"},
      {"leading-zero", file_of(one_tensor("F32", "[04]", "[0,16]"), f32x4),
       "integer with a leading zero"},
      {"fractional-extent", file_of(one_tensor("F32", "[4.0]", "[0,16]"), f32x4), "expected ']'"},
      // unknown dtype
      {"unknown-dtype", file_of(one_tensor("F64", "[2]", "[0,16]"), f32x4),
       "dtype 'F64' is not one of F32, F16, BF16, U8, I32"},
      {"lowercase-dtype", file_of(one_tensor("f32", "[4]", "[0,16]"), f32x4),
       "dtype 'f32' is not one of"},
      // missing or repeated key
      {"missing-offsets", file_of(R"({"w":{"dtype":"F32","shape":[4]}})", f32x4),
       "tensor w lacks dtype, shape or data_offsets"},
      {"missing-dtype", file_of(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", f32x4),
       "tensor w lacks dtype, shape or data_offsets"},
      {"repeated-dtype",
       file_of(R"({"w":{"dtype":"F32","shape":[4],"dtype":"F32","data_offsets":[0,16]}})", f32x4),
       "tensor w: unexpected or repeated key 'dtype'"},
      {"unknown-key", file_of(R"({"w":{"dtype":"F32","shape":[4],"offsets":[0,16]}})", f32x4),
       "tensor w: unexpected or repeated key 'offsets'"},
      {"repeated-metadata", file_of(R"({"__metadata__":{},"__metadata__":{"a":"b"}})"),
       "repeated __metadata__"},
      {"repeated-metadata-field", file_of(R"({"__metadata__":{"a":"b","a":"c"}})"),
       "metadata field a appears twice"},
      // offsets reversed, malformed, or past the data
      {"reversed-offsets", file_of(one_tensor("U8", "[4]", "[8,4]"), f32x4),
       "tensor w: data_offsets is not [begin, end] with begin <= end"},
      {"one-offset", file_of(one_tensor("U8", "[0]", "[0]"), f32x4),
       "tensor w: data_offsets is not [begin, end] with begin <= end"},
      {"offsets-past-the-data", file_of(one_tensor("F32", "[4]", "[0,16]"), data_bytes(12)),
       "integer out of range"},
      // An offset digit larger than the whole data: the bound's arithmetic must not wrap.
      {"offsets-past-a-few-bytes", file_of(one_tensor("U8", "[4]", "[5,9]"), data_bytes(4)),
       "integer out of range"},
      {"empty-tensor-past-the-data", file_of(one_tensor("U8", "[0]", "[7,7]"), data_bytes(4)),
       "integer out of range"},
      // bytes not matching shape * dtype size
      {"size-mismatch", file_of(one_tensor("F32", "[2]", "[0,4]"), f32x4),
       "tensor w: 4 bytes for shape [2] of f32"},
      {"size-mismatch-0d", file_of(one_tensor("BF16", "[]", "[0,4]"), f32x4),
       "tensor w: 4 bytes for shape [] of bf16"},
      // a shape whose product overflows: 2^64 elements wrap to 0, which [0, 0] would match
      {"overflowing-shape", file_of(one_tensor("F32", "[4294967296,4294967296]", "[0,0]"), f32x4),
       "tensor w: shape [4294967296, 4294967296] is larger than the file's data"},
      {"extent-past-int64", file_of(one_tensor("F32", "[9223372036854775808]", "[0,0]"), f32x4),
       "integer out of range"},
      // a tensor named twice, also when an escape spells the name
      {"tensor-named-twice",
       file_of(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
               R"("\u0077":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
               data_bytes(2)),
       "tensor w appears twice"},
  };
}

// Parses `file` and returns the alloy::Error's message, "" when it parsed; any other exception
// fails the test.
std::string error_of(std::string file, const std::string& name = kName) {
  try {
    parse_safetensors(std::move(file), name);
  } catch (const Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    BOOST_ERROR("threw " << typeid(error).name() << " instead of alloy::Error: " << error.what());
    return "(wrong exception type)";
  }
  return "";
}

void check_message(const std::string& message, const std::string& name, const std::string& reason) {
  const std::string prefix = "safetensors file " + name + ": ";
  BOOST_TEST(message.compare(0, prefix.size(), prefix) == 0,
             "'" << message << "' lacks the prefix");
  BOOST_TEST(message.find(reason) != std::string::npos, "'" << message << "' lacks: " << reason);
}

void check_fault(const std::string& fault_name) {
  for (const Fault& fault : faults()) {
    if (fault.name != fault_name) continue;
    BOOST_TEST_CONTEXT("fault " << fault.name) {
      check_message(error_of(fault.file), kName, fault.reason);
    }
    return;
  }
  BOOST_ERROR("no fault named " << fault_name);
}

// Every entry's bytes lie inside the file's data, whole.
void check_within_data(const SafetensorsFile& file) {
  BOOST_TEST_REQUIRE(file.data_start <= file.contents.size());
  const std::size_t data = file.contents.size() - file.data_start;
  for (const auto& [name, entry] : file.tensors) {
    BOOST_TEST_CONTEXT("tensor " << name) {
      BOOST_TEST(entry.offset <= data);
      BOOST_TEST(entry.bytes <= data - std::min(entry.offset, data));
      BOOST_TEST(file.bytes_of(entry).size() == entry.bytes);
    }
  }
}

NamedTensor patterned(const std::string& name, DType dtype, const Shape& shape, int seed) {
  NamedTensor tensor{name, dtype, shape, {}};
  tensor.data.resize(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  for (std::size_t i = 0; i < tensor.data.size(); ++i)
    tensor.data[i] = static_cast<unsigned char>(seed + 37 * i);
  return tensor;
}

// Every dtype the writer knows, a 0-d tensor, a zero extent, and names and metadata that need
// escaping (a quote, a backslash, control characters, UTF-8).
CheckpointState every_dtype_state() {
  CheckpointState state;
  state.alloy_version = "0.1.0-test";
  state.model = "mixed";
  state.epoch = 3;
  state.step = 45;
  state.params_digest = "0123456789abcdef";
  state.parameters = {patterned("a.weight", DType::f32, {2, 3}, 1),
                      patterned("b.f16", DType::f16, {4}, 2),
                      patterned("scalar \"bf16\"", DType::bf16, {}, 3)};
  state.buffers = {patterned("empty\\u8\t\x01", DType::u8, {3, 0}, 4),
                   patterned("count", DType::i32, {5, 1}, 5)};
  return state;
}

const std::map<std::string, std::string> kExtraMetadata = {
    {"note", "a \"quoted\" \\ line\nbreak\x1f"}, {"caf\xc3\xa9", "\xe2\x82\xac 5"}};

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors_read)

BOOST_AUTO_TEST_CASE(an_export_reads_back_with_every_dtype_shape_byte_and_metadata) {
  TempDir dir;
  const CheckpointState state = every_dtype_state();
  const std::string path = dir.file("model.safetensors");
  export_safetensors(state, path, kExtraMetadata);

  const SafetensorsFile file = read_safetensors(path);
  check_within_data(file);
  std::vector<NamedTensor> tensors = state.parameters;
  tensors.insert(tensors.end(), state.buffers.begin(), state.buffers.end());
  BOOST_TEST(file.tensors.size() == tensors.size());
  for (const NamedTensor& tensor : tensors) {
    BOOST_TEST_CONTEXT("tensor " << tensor.name) {
      const auto found = file.tensors.find(tensor.name);
      BOOST_TEST_REQUIRE((found != file.tensors.end()));
      BOOST_TEST((found->second.dtype == tensor.dtype));
      BOOST_TEST(found->second.shape == tensor.shape);
      BOOST_TEST(file.bytes_of(found->second) ==
                 std::string(tensor.data.begin(), tensor.data.end()));
    }
  }
  std::map<std::string, std::string> expected = {
      {"format", "pt"}, {"alloy_version", "0.1.0-test"},       {"model", "mixed"}, {"epoch", "3"},
      {"step", "45"},   {"params_digest", "0123456789abcdef"},
  };
  expected.insert(kExtraMetadata.begin(), kExtraMetadata.end());
  BOOST_TEST((file.metadata == expected));
}

BOOST_AUTO_TEST_CASE(escapes_whitespace_and_keys_in_any_order_parse) {
  const std::string data = data_bytes(12);
  const SafetensorsFile file = parse_safetensors(file_of(kHandBuiltHeader, data), kName);
  check_within_data(file);
  BOOST_TEST(file.data_start == 8 + kHandBuiltHeader.size());
  BOOST_TEST_REQUIRE(file.tensors.size() == 2u);
  const auto weight = file.tensors.find("w\xc3\xa9ight\xf0\x9f\x98\x80");
  BOOST_TEST_REQUIRE((weight != file.tensors.end()));
  BOOST_TEST((weight->second.dtype == DType::f32));
  BOOST_TEST(weight->second.shape == Shape({2}));
  BOOST_TEST(file.bytes_of(weight->second) == data.substr(0, 8));
  const auto scalar = file.tensors.find("b");
  BOOST_TEST_REQUIRE((scalar != file.tensors.end()));
  BOOST_TEST((scalar->second.dtype == DType::i32));
  BOOST_TEST(scalar->second.shape.empty());
  BOOST_TEST(file.bytes_of(scalar->second) == data.substr(8, 4));
  const std::map<std::string, std::string> metadata = {{"caf\xc3\xa9", "smile \xf0\x9f\x98\x80"},
                                                       {"esc", "\"\\/\b\f\n\r\t"}};
  BOOST_TEST((file.metadata == metadata));

  // No tensors and no metadata is a valid file.
  const SafetensorsFile empty = parse_safetensors(file_of("{}"), kName);
  BOOST_TEST(empty.tensors.empty());
  BOOST_TEST(empty.metadata.empty());
}

BOOST_AUTO_TEST_CASE(a_file_too_short_for_the_length_fails) {
  check_fault("empty");
  check_fault("short-length");
}

BOOST_AUTO_TEST_CASE(a_header_length_past_the_file_fails) {
  check_fault("header-past-the-file");
  check_fault("huge-header-length");
}

BOOST_AUTO_TEST_CASE(a_header_over_the_limit_fails_even_when_the_file_holds_it) {
  // A valid header one byte over the bound: only the bound refuses it.
  std::string header = "{}";
  header.resize(kMaxSafetensorsHeader + 1, ' ');
  check_message(error_of(file_of(header)), kName,
                "header of " + std::to_string(kMaxSafetensorsHeader + 1) + " bytes in a file of " +
                    std::to_string(kMaxSafetensorsHeader + 9));
}

BOOST_AUTO_TEST_CASE(bad_json_fails_at_its_byte) {
  for (const char* fault :
       {"empty-header", "unterminated-string", "unterminated-escape", "control-character",
        "bad-escape", "short-unicode-escape", "bad-hex-digit", "lone-low-surrogate",
        "high-surrogate-alone", "high-surrogate-then-not-low", "trailing-text", "missing-colon",
        "trailing-comma", "missing-close", "tensor-not-an-object", "metadata-not-a-string",
        "negative-extent", "leading-zero", "fractional-extent"}) {
    check_fault(fault);
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_dtype_fails) {
  check_fault("unknown-dtype");
  check_fault("lowercase-dtype");
}

BOOST_AUTO_TEST_CASE(a_missing_or_repeated_key_fails) {
  for (const char* fault :
       {"missing-offsets", "missing-dtype", "repeated-dtype", "unknown-key", "repeated-metadata"})
    check_fault(fault);
}

BOOST_AUTO_TEST_CASE(offsets_reversed_or_past_the_data_fail) {
  for (const char* fault : {"reversed-offsets", "one-offset", "offsets-past-the-data",
                            "offsets-past-a-few-bytes", "empty-tensor-past-the-data"})
    check_fault(fault);
}

BOOST_AUTO_TEST_CASE(bytes_not_matching_the_shape_fail) {
  check_fault("size-mismatch");
  check_fault("size-mismatch-0d");
}

BOOST_AUTO_TEST_CASE(a_shape_whose_product_overflows_fails) {
  check_fault("overflowing-shape");
  check_fault("extent-past-int64");
}

BOOST_AUTO_TEST_CASE(a_tensor_named_twice_fails) {
  check_fault("tensor-named-twice");
}

BOOST_AUTO_TEST_CASE(read_safetensors_names_the_path) {
  TempDir dir;
  const std::string missing = dir.file("absent.safetensors");
  try {
    read_safetensors(missing);
    BOOST_ERROR("a missing file was read");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("cannot open " + missing) != std::string::npos, message);
  }
}

// Replays tests/data/safetensors_corpus: files named valid-* parse with every tensor inside the
// data, every other one fails with an alloy::Error naming it (and the reason faults() gives).
BOOST_AUTO_TEST_CASE(every_corpus_file_parses_or_fails_cleanly) {
  std::map<std::string, std::string> reasons;
  for (const Fault& fault : faults())
    reasons[fault.name + ".safetensors"] = fault.reason;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpus))
    files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  int valid = 0;
  for (const std::string& path : files) {
    const std::string name = std::filesystem::path(path).filename().string();
    BOOST_TEST_CONTEXT("corpus file " << name) {
      if (name.rfind("valid-", 0) == 0) {
        check_within_data(read_safetensors(path));
        ++valid;
      } else {
        std::string message;
        try {
          read_safetensors(path);
        } catch (const Error& error) {
          message = error.what();
        }
        check_message(message, path, reasons.count(name) != 0 ? reasons[name] : "");
      }
    }
    reasons.erase(name);
  }
  BOOST_TEST(valid >= 3, "the corpus lacks its valid-* files");
  for (const auto& missing : reasons)
    BOOST_ERROR("the corpus lacks " << missing.first << "; run tools/fuzz/make_corpus.sh");
}

// Writes the corpus (tools/fuzz/make_corpus.sh runs it); disabled so that ctest never rewrites
// the source tree. Inputs saved from fuzzer crashes (fuzz-*) stay.
BOOST_AUTO_TEST_CASE(regenerate, *boost::unit_test::disabled()) {
  std::filesystem::create_directories(kCorpus);
  std::vector<Fault> files = faults();
  files.push_back({"valid-empty", file_of("{}"), ""});
  files.push_back({"valid-hand-built", file_of(kHandBuiltHeader, data_bytes(12)), ""});
  for (const Fault& file : files) {
    std::ofstream out(kCorpus + "/" + file.name + ".safetensors", std::ios::binary);
    out.write(file.file.data(), static_cast<std::streamsize>(file.file.size()));
    BOOST_TEST_REQUIRE(out.good(), "cannot write " << file.name);
  }
  export_safetensors(every_dtype_state(), kCorpus + "/valid-export.safetensors", kExtraMetadata);
  BOOST_TEST_MESSAGE("wrote " << files.size() + 1 << " files to " << kCorpus);
}

BOOST_AUTO_TEST_SUITE_END()
