// Checkpoint files and directories. A file is a fixed header and a Boost archive payload:
//   "ALLOYCKP" | format version u32 | payload bytes u64 | CRC-32 of the payload u32 | payload
// (integers little-endian). Writes are atomic (posix_file.h); reads check every part and fail
// with one line naming the file and the problem. A directory holds "step-%08lld.ckpt" files and
// the "step-%08lld" directories of sharded checkpoints (sharded_checkpoint.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/posix_file.h"
#include "core/checkpoint/sharded_checkpoint.h"

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
// The same for a payload of `payload_bytes` bytes whose CRC-32 is `payload_crc`, written in parts.
std::string encode_header(std::uint64_t payload_bytes, std::uint32_t payload_crc);

// The CRC-32 of `bytes`, continuing from `crc` (0 to start), as the header stores it.
std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc = 0);

// Checks a header against the real size of the file it starts (before anything is allocated
// for the payload); `prefix` holds the file's first min(file_bytes, kHeaderBytes) bytes. Throws
// "checkpoint NAME: ..." for an empty, truncated, foreign, newer or corrupt header.
CheckpointHeader check_header(std::string_view prefix, std::uint64_t file_bytes,
                              const std::string& name);

void write_checkpoint(const std::string& path, const CheckpointState& state);

// Throws alloy::Error "checkpoint PATH: <reason>" for a missing, empty, truncated, foreign,
// newer or corrupt file. `header`, when given, receives the file's header.
CheckpointState read_checkpoint(const std::string& path, CheckpointHeader* header = nullptr);

// read_checkpoint's checks on a file image already in memory; `name` labels the errors.
CheckpointState decode_checkpoint(std::string_view image, const std::string& name,
                                  CheckpointHeader* header = nullptr);

// Opens `path` for reading and gives its size in `bytes`. Throws "checkpoint PATH: <missing>"
// when it does not exist, and names the path for any other failure or a file that is not a
// regular one.
FileDescriptor open_checkpoint_file(const std::string& path, const std::string& missing,
                                    std::uint64_t& bytes);

// DIR/step-00000042.ckpt
std::string checkpoint_path(const std::string& dir, std::int64_t step);

struct CheckpointEntry {
  std::string path;  // a file, or a sharded checkpoint's step directory
  std::int64_t step = 0;
  bool sharded = false;
};

// The checkpoints in `dir`, oldest step first: the files, and the step directories of sharded
// checkpoints (sharded_checkpoint.h) that hold a manifest; other files (temporaries of an
// interrupted save included) and step directories without a manifest are ignored. Throws when
// `dir` is missing or unreadable.
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// The step directories in `dir` without a manifest (sharded saves that never completed),
// oldest step first.
std::vector<CheckpointEntry> list_incomplete_sharded(const std::string& dir);

// Deletes a checkpoint: the file, or the step directory with its shards; one already gone is
// no error. Throws naming the path.
void remove_checkpoint(const CheckpointEntry& entry);

// A checkpoint file, or a sharded checkpoint (its step directory or manifest) gathered into
// one plain state (gather_sharded_state). Throws "checkpoint PATH: ...".
CheckpointState read_any_checkpoint(const std::string& path);

struct LoadedCheckpoint {
  std::string path;
  CheckpointState state;
  // A sharded checkpoint opened without gathering: `state` is its shared state (no parameters,
  // no flat optimizer state), which read_flat_range reads by range through this.
  std::optional<Manifest> manifest;
};

// A checkpoint file, or a sharded checkpoint (step directory or manifest): gathered into one
// plain state, or with `gather` false its shared state and manifest, once every shard file is
// found at the manifest's size. Throws "checkpoint PATH: ...".
LoadedCheckpoint open_checkpoint(const std::string& path, bool gather);

using WarningSink = std::function<void(const std::string&)>;

// The newest checkpoint in `dir` (file or sharded, opened as open_checkpoint does) that reads
// cleanly; each damaged newer one is reported to `warn` and skipped. Throws when `dir` is missing
// or holds no valid checkpoint.
LoadedCheckpoint find_latest_valid(const std::string& dir, const WarningSink& warn,
                                   bool gather = true);

// Deletes all but the newest `keep` (>= 1) checkpoints in `dir` (files or sharded); returns the
// deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep);

}  // namespace alloy::checkpoint
