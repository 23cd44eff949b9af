// Export of a checkpoint's weights in the safetensors format, so other frameworks can load
// them: an 8-byte little-endian header length N, N bytes of JSON (padded with spaces to a
// multiple of 8) mapping each tensor name to {"dtype", "shape", "data_offsets"}, with string
// metadata under "__metadata__", then the raw little-endian tensor bytes.
#pragma once

#include <map>
#include <string>

#include "core/checkpoint/checkpoint.h"

namespace alloy::checkpoint {

// The safetensors dtype name of `dtype`: "F32", "F16", "BF16", "U8", "I32".
const char* safetensors_dtype(DType dtype);

// Writes the state's parameters (the fp32 masters) and buffers under their Alloy names, with
// the model, step, epoch and params_digest as metadata, and `metadata` after them. Atomic, like
// write_checkpoint.
void export_safetensors(const CheckpointState& state, const std::string& out_path,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace alloy::checkpoint
