// Damaged checkpoint files, each with the reason read_checkpoint must give. The file test
// checks each message; tools/fuzz/make_corpus.sh writes them to tests/data/checkpoint_corpus,
// which the corpus test replays. Every image is under 4 KiB.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_file.h"
#include "core/random.h"

namespace alloy::checkpoint::test {

struct DamagedFile {
  std::string name;    // its file name in the corpus
  std::string image;   // the file's bytes
  std::string reason;  // what the error message must contain
};

inline NamedTensor small_tensor(const std::string& name, const Shape& shape, std::size_t bytes) {
  NamedTensor tensor{name, DType::f32, shape, std::vector<unsigned char>(bytes)};
  for (std::size_t i = 0; i < bytes; ++i)
    tensor.data[i] = static_cast<unsigned char>(i * 37);
  return tensor;
}

// A small state whose strings are unique markers, so tests can find fields in its payload.
inline CheckpointState marker_state() {
  CheckpointState state;
  state.alloy_version = "0.1.0";
  state.model = "marker-model";
  state.epoch = 2;
  state.step = 120;
  state.rng_states = {{"init", {1, 2, 3, 4}}};
  state.optimizer.kind = "marker-kind";
  state.parameters = {small_tensor("marker.weight", {2, 3}, 24),
                      small_tensor("marker.bias", {3}, 12)};
  state.buffers = {small_tensor("marker.buffer", {2}, 8)};
  return state;
}

inline std::string framed(const std::string& payload) {
  return encode_header(payload) + payload;
}

inline std::string valid_image() {
  return framed(serialize_state(marker_state()));
}

// Where the only occurrence of `marker` ends in `bytes`.
inline std::size_t end_of(const std::string& bytes, const std::string& marker) {
  const std::size_t at = bytes.find(marker);
  if (at == std::string::npos || bytes.find(marker, at + 1) != std::string::npos) {
    throw std::logic_error("marker " + marker + " is not in the payload exactly once");
  }
  return at + marker.size();
}

inline std::string with_u64(std::string bytes, std::size_t offset, std::uint64_t value) {
  for (int i = 0; i < 8; ++i)
    bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

inline std::string with_u32(std::string bytes, std::size_t offset, std::uint32_t value) {
  for (int i = 0; i < 4; ++i)
    bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

inline std::string with_byte(std::string bytes, std::size_t offset, char value) {
  bytes[offset] = value;
  return bytes;
}

// The payload of `state` with `key` = `value` in its `extra` map as a file may hold it, whatever
// the records allow (serialize_state refuses a record's key there): a stand-in key of the
// same length is written and renamed in place.
inline std::string payload_with_entry(CheckpointState state, const std::string& key,
                                      const std::string& value) {
  const std::string stand_in(key.size(), '~');
  state.extra[stand_in] = value;
  std::string payload = serialize_state(state);
  payload.replace(end_of(payload, stand_in) - key.size(), key.size(), key);
  return payload;
}

inline std::vector<DamagedFile> damaged_files() {
  const std::string payload = serialize_state(marker_state());
  const std::string good = framed(payload);
  const std::size_t size = payload.size();
  const auto promises = [&](std::size_t present) {
    return "header promises " + std::to_string(size) + " payload bytes, file has " +
           std::to_string(present);
  };

  // The payload's layout after a NamedTensor's name: dtype u8, shape length u64, extents,
  // data length u64, data. After the optimizer's kind: lr, momentum, weight_decay (f32),
  // nesterov (u8), beta1, beta2, eps (f32), steps (i64), then the parameter list's length.
  const std::size_t weight = end_of(payload, "marker.weight");
  const std::size_t model = end_of(payload, "marker-model") - std::strlen("marker-model");
  const std::size_t kind = end_of(payload, "marker-kind");

  CheckpointState mismatched = marker_state();
  mismatched.parameters[0].data.resize(20);
  CheckpointState duplicated = marker_state();
  duplicated.buffers.push_back(duplicated.buffers[0]);
  Generator random(4);
  std::string garbage(256, '\0');
  for (auto& byte : garbage)
    byte = static_cast<char>(random.next_u64());
  std::string bad_signature = payload;
  bad_signature[end_of(payload, "serialization::archive") - 1] = 'X';

  return {
      {"empty.ckpt", "", "empty file"},
      {"truncated-header.ckpt", good.substr(0, 11), "truncated header"},
      {"header-only.ckpt", good.substr(0, kHeaderBytes), "truncated: " + promises(0)},
      {"truncated-payload.ckpt", good.substr(0, kHeaderBytes + size / 2),
       "truncated: " + promises(size / 2)},
      {"truncated-last-byte.ckpt", good.substr(0, good.size() - 1),
       "truncated: " + promises(size - 1)},
      {"trailing-bytes.ckpt", good + "junk", "corrupt: " + promises(size + 4)},
      {"flipped-payload-byte.ckpt",
       with_byte(good, kHeaderBytes + size / 2, good[kHeaderBytes + size / 2] ^ 0x10),
       "corrupt: CRC mismatch"},
      {"flipped-crc-byte.ckpt", with_byte(good, 21, good[21] ^ 0x01), "corrupt: CRC mismatch"},
      {"wrong-magic.ckpt", with_byte(good, 0, 'X'), "not an Alloy checkpoint"},
      {"text-file.ckpt", "this is a text file, not a checkpoint\n", "not an Alloy checkpoint"},
      {"newer-version.ckpt", with_u32(good, 8, 2),
       "written by a newer Alloy: format version 2, this build reads up to 1"},
      {"version-zero.ckpt", with_u32(good, 8, 0), "corrupt: format version 0"},
      {"huge-payload-length.ckpt", with_u64(good, 12, 1ull << 63),
       "truncated: header promises 9223372036854775808 payload bytes"},
      {"tensor-size-mismatch.ckpt", framed(serialize_state(mismatched)),
       "corrupt: parameters tensor 'marker.weight' holds 20 bytes, but f32[2, 3] needs 24"},
      {"duplicate-tensor.ckpt", framed(serialize_state(duplicated)),
       "corrupt: buffers tensor 'marker.buffer' appears twice"},
      {"huge-string-length.ckpt", framed(with_u64(payload, model - 8, 1ull << 60)),
       "corrupt: a string claims 1152921504606846976 entries"},
      {"huge-list-length.ckpt", framed(with_u64(payload, kind + 33, 1ull << 61)),
       "corrupt: a list claims 2305843009213693952 entries"},
      {"huge-shape-length.ckpt", framed(with_u64(payload, weight + 1, 1ull << 62)),
       "corrupt: a shape claims 4611686018427387904 entries"},
      {"huge-data-length.ckpt", framed(with_u64(payload, weight + 25, 1ull << 40)),
       "corrupt: tensor data claims 1099511627776 entries"},
      {"negative-extent.ckpt", framed(with_u64(payload, weight + 9, ~std::uint64_t{1})),
       "corrupt: parameters tensor 'marker.weight' has extent -2"},
      {"overflowing-shape.ckpt",
       framed(with_u64(with_u64(payload, weight + 9, 1ull << 62), weight + 17, 1ull << 62)),
       "corrupt: parameters tensor 'marker.weight' has an impossible shape"},
      {"unknown-dtype.ckpt", framed(with_byte(payload, weight, 9)),
       "corrupt: parameters tensor 'marker.weight' has unknown dtype code 9"},
      {"invalid-flag.ckpt", framed(with_byte(payload, kind + 12, 7)), "corrupt: a flag holds 7"},
      {"archive-trailing-bytes.ckpt", framed(payload + "extra"),
       "corrupt: 5 unexpected bytes after the state"},
      {"cut-archive.ckpt", framed(payload.substr(0, size / 2)), "corrupt: "},
      {"garbage-payload.ckpt", framed(garbage), "corrupt: "},
      {"damaged-archive-signature.ckpt", framed(bad_signature),
       "corrupt: invalid archive signature"},
      {"corrupt-record-value.ckpt",
       framed(payload_with_entry(marker_state(), "accumulation_steps", "4x")),
       "corrupt field accumulation_steps '4x'"},
  };
}

}  // namespace alloy::checkpoint::test
