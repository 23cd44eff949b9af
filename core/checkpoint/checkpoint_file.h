// Checkpoint files and directories. A file is a fixed header and a Boost archive payload:
//   "ALLOYCKP" | format version u32 | payload bytes u64 | CRC-32 of the payload u32 | payload
// (integers little-endian). Writes are atomic (posix_file.h); reads check every part and fail
// with one line naming the file and the problem. A directory holds "step-%08lld.ckpt" files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/checkpoint.h"

namespace alloy::checkpoint {

inline constexpr char kMagic[8] = {'A', 'L', 'L', 'O', 'Y', 'C', 'K', 'P'};
inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr std::size_t kHeaderBytes = 24;

struct CheckpointHeader {
  std::uint32_t format_version = 0;
  std::uint64_t payload_bytes = 0;
  std::uint32_t payload_crc = 0;
};

// The header that frames `payload` at the current format version.
std::string encode_header(std::string_view payload);

void write_checkpoint(const std::string& path, const CheckpointState& state);

// Throws alloy::Error "checkpoint PATH: <reason>" for a missing, empty, truncated, foreign,
// newer or corrupt file. `header`, when given, receives the file's header.
CheckpointState read_checkpoint(const std::string& path, CheckpointHeader* header = nullptr);

// read_checkpoint's checks on a file image already in memory; `name` labels the errors.
CheckpointState decode_checkpoint(std::string_view image, const std::string& name,
                                  CheckpointHeader* header = nullptr);

// DIR/step-00000042.ckpt
std::string checkpoint_path(const std::string& dir, std::int64_t step);

struct CheckpointEntry {
  std::string path;
  std::int64_t step = 0;
};

// The checkpoint files in `dir`, oldest step first; other files (temporaries of an
// interrupted save included) are ignored. Throws when `dir` is missing or unreadable.
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

struct LoadedCheckpoint {
  std::string path;
  CheckpointState state;
};

using WarningSink = std::function<void(const std::string&)>;

// The newest checkpoint in `dir` that reads cleanly; each damaged newer one is reported to
// `warn` and skipped. Throws when `dir` is missing or holds no valid checkpoint.
LoadedCheckpoint find_latest_valid(const std::string& dir, const WarningSink& warn);

// Deletes all but the newest `keep` (>= 1) checkpoints in `dir`; returns the deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep);

}  // namespace alloy::checkpoint
