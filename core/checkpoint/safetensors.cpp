#include "core/checkpoint/safetensors.h"

#include <cstdio>
#include <set>
#include <string_view>
#include <vector>

#include "core/checkpoint/posix_file.h"
#include "core/error.h"

namespace alloy::checkpoint {

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + '"';
}

}  // namespace

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::u8:
      return "U8";
    case DType::i32:
      return "I32";
  }
  fail("no safetensors dtype for dtype code ", static_cast<int>(dtype));
}

void export_safetensors(const CheckpointState& state, const std::string& out_path,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const NamedTensor*> tensors;
  for (const auto& tensor : state.parameters)
    tensors.push_back(&tensor);
  for (const auto& tensor : state.buffers)
    tensors.push_back(&tensor);

  std::string json = "{\"__metadata__\":{";
  json += "\"format\":\"pt\"";
  json += ",\"alloy_version\":" + json_string(state.alloy_version);
  json += ",\"model\":" + json_string(state.model);
  json += ",\"epoch\":\"" + std::to_string(state.epoch) + '"';
  json += ",\"step\":\"" + std::to_string(state.step) + '"';
  json += ",\"params_digest\":" + json_string(state.params_digest);
  for (const auto& [key, value] : metadata)
    json += ',' + json_string(key) + ':' + json_string(value);
  json += '}';

  std::set<std::string> names;
  std::vector<std::string_view> parts = {std::string_view()};  // the header length, below
  std::uint64_t offset = 0;
  for (const NamedTensor* tensor : tensors) {
    ALLOY_CHECK(names.insert(tensor->name).second, "safetensors export to ", out_path,
                ": tensor name ", tensor->name, " appears twice");
    json += ',' + json_string(tensor->name) + ":{\"dtype\":\"" + safetensors_dtype(tensor->dtype) +
            "\",\"shape\":[";
    for (std::size_t i = 0; i < tensor->shape.size(); ++i) {
      json += (i ? "," : "") + std::to_string(tensor->shape[i]);
    }
    const std::uint64_t end = offset + tensor->data.size();
    json += "],\"data_offsets\":[" + std::to_string(offset) + ',' + std::to_string(end) + "]}";
    offset = end;
    parts.emplace_back(reinterpret_cast<const char*>(tensor->data.data()), tensor->data.size());
  }
  json += '}';
  // Padding keeps the tensor bytes 8-byte aligned for readers that map the file.
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string length;
  for (int i = 0; i < 8; ++i) {
    length.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xff));
  }
  parts[0] = length;
  parts.insert(parts.begin() + 1, json);
  write_file_atomically(out_path, parts);
}

}  // namespace alloy::checkpoint
