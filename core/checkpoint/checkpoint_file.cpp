#include "core/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/checkpoint/posix_file.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace alloy::checkpoint {

namespace {

namespace fs = std::filesystem;

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t offset, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  }
  return value;
}

template <class... Parts>
[[noreturn]] void fail_file(const std::string& name, Parts&&... parts) {
  fail("checkpoint ", name, ": ", std::forward<Parts>(parts)...);
}

// Checks the header against the real file size, before anything is allocated for the
// payload. `prefix` holds the file's first min(file_bytes, kHeaderBytes) bytes.
}  // namespace

CheckpointHeader check_header(std::string_view prefix, std::uint64_t file_bytes,
                              const std::string& name) {
  if (file_bytes == 0) fail_file(name, "empty file");
  if (file_bytes < kHeaderBytes) {
    fail_file(name, "truncated header: ", file_bytes, " bytes, a header needs ", kHeaderBytes);
  }
  if (prefix.substr(0, sizeof kMagic) != std::string_view(kMagic, sizeof kMagic)) {
    fail_file(name, "not an Alloy checkpoint (no ALLOYCKP magic)");
  }
  CheckpointHeader header;
  header.format_version = static_cast<std::uint32_t>(get_le(prefix, 8, 4));
  header.payload_bytes = get_le(prefix, 12, 8);
  header.payload_crc = static_cast<std::uint32_t>(get_le(prefix, 20, 4));
  if (header.format_version > kFormatVersion) {
    fail_file(name, "written by a newer Alloy: format version ", header.format_version,
              ", this build reads up to ", kFormatVersion);
  }
  if (header.format_version == 0) fail_file(name, "corrupt: format version 0");
  const std::uint64_t present = file_bytes - kHeaderBytes;
  if (header.payload_bytes > present) {
    fail_file(name, "truncated: header promises ", header.payload_bytes,
              " payload bytes, file has ", present);
  }
  if (header.payload_bytes < present) {
    fail_file(name, "corrupt: header promises ", header.payload_bytes, " payload bytes, file has ",
              present);
  }
  return header;
}

namespace {

CheckpointState check_payload(std::string_view payload, const CheckpointHeader& header,
                              const std::string& name) {
  const std::uint32_t crc = crc32_of(payload);
  if (crc != header.payload_crc) fail_file(name, "corrupt: CRC mismatch");
  try {
    return deserialize_state(payload);
  } catch (const Error& error) {
    fail_file(name, error.what());
  }
}

// "step-<digits><suffix>" -> the step, or -1 for any other name.
std::int64_t step_of(const std::string& filename, std::string_view suffix) {
  constexpr std::string_view prefix = "step-";
  if (filename.size() <= prefix.size() + suffix.size()) return -1;
  if (filename.compare(0, prefix.size(), prefix) != 0) return -1;
  if (filename.compare(filename.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
  const std::string digits =
      filename.substr(prefix.size(), filename.size() - prefix.size() - suffix.size());
  if (digits.size() > 18) return -1;  // beyond int64
  std::int64_t step = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

}  // namespace

std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc) {
  uLong value = crc;
  // zlib takes 32-bit lengths.
  while (!bytes.empty()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size(), 1u << 30);
    value = crc32(value, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(chunk));
    bytes.remove_prefix(chunk);
  }
  return static_cast<std::uint32_t>(value);
}

std::string encode_header(std::uint64_t payload_bytes, std::uint32_t payload_crc) {
  std::string header(kMagic, sizeof kMagic);
  put_le(header, kFormatVersion, 4);
  put_le(header, payload_bytes, 8);
  put_le(header, payload_crc, 4);
  return header;
}

std::string encode_header(std::string_view payload) {
  return encode_header(payload.size(), crc32_of(payload));
}

void write_checkpoint(const std::string& path, const CheckpointState& state) {
  const std::string payload = serialize_state(state);
  const std::string header = encode_header(payload);
  write_file_atomically(path, {header, payload});
}

FileDescriptor open_checkpoint_file(const std::string& path, const std::string& missing,
                                    std::uint64_t& bytes) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) fail_file(path, missing);
    fail_file(path, "cannot open: ", std::strerror(errno));
  }
  FileDescriptor file(fd, path);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) fail_file(path, "cannot stat: ", std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail_file(path, "not a regular file");
  bytes = static_cast<std::uint64_t>(info.st_size);
  return file;
}

CheckpointState read_checkpoint(const std::string& path, CheckpointHeader* header) {
  std::uint64_t file_bytes = 0;
  const FileDescriptor file = open_checkpoint_file(path, "no such file", file_bytes);

  std::string prefix(std::min<std::uint64_t>(file_bytes, kHeaderBytes), '\0');
  prefix.resize(file.read_up_to(prefix.data(), prefix.size()));
  // A file that shrank since fstat() is judged by what could be read.
  const CheckpointHeader parsed =
      check_header(prefix, prefix.size() < kHeaderBytes ? prefix.size() : file_bytes, path);

  // Bounded by the real file size, which check_header has matched against the header.
  std::string payload(parsed.payload_bytes, '\0');
  const std::size_t got = file.read_up_to(payload.data(), payload.size());
  if (got != payload.size()) {
    fail_file(path, "truncated: header promises ", parsed.payload_bytes,
              " payload bytes, file has ", got);
  }
  CheckpointState state = check_payload(payload, parsed, path);
  if (header != nullptr) *header = parsed;
  return state;
}

CheckpointState decode_checkpoint(std::string_view image, const std::string& name,
                                  CheckpointHeader* header) {
  const CheckpointHeader parsed = check_header(image.substr(0, kHeaderBytes), image.size(), name);
  CheckpointState state = check_payload(image.substr(kHeaderBytes), parsed, name);
  if (header != nullptr) *header = parsed;
  return state;
}

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  return sharded_checkpoint_dir(dir, step) + ".ckpt";
}

namespace {

// The checkpoint files and complete step directories of `dir` (`complete`), or its step
// directories without a manifest, unsorted.
std::vector<CheckpointEntry> scan(const std::string& dir, bool complete) {
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (!fs::exists(status)) fail("checkpoint directory ", dir, " does not exist");
  if (!fs::is_directory(status)) fail("checkpoint directory ", dir, " is not a directory");
  std::vector<CheckpointEntry> entries;
  fs::directory_iterator it(dir, error);
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (const std::int64_t step = step_of(name, ".ckpt"); step >= 0 && complete) {
      entries.push_back({it->path().string(), step, false});
      continue;
    }
    const std::int64_t step = step_of(name, "");
    std::error_code ignored;
    if (step < 0 || !it->is_directory(ignored)) continue;
    const bool has_manifest = fs::exists(it->path() / kManifestName, ignored);
    if (has_manifest == complete) entries.push_back({it->path().string(), step, true});
  }
  if (error) fail("cannot list checkpoint directory ", dir, ": ", error.message());
  return entries;
}

}  // namespace

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointEntry> entries = scan(dir, true);
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return entries;
}

std::vector<CheckpointEntry> list_incomplete_sharded(const std::string& dir) {
  std::vector<CheckpointEntry> entries = scan(dir, false);
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return entries;
}

void remove_checkpoint(const CheckpointEntry& entry) {
  std::error_code error;
  fs::remove_all(entry.path, error);
  if (error && error != std::errc::no_such_file_or_directory) {
    fail("cannot remove old checkpoint ", entry.path, ": ", error.message());
  }
}

CheckpointState read_any_checkpoint(const std::string& path) {
  return open_checkpoint(path, true).state;
}

LoadedCheckpoint open_checkpoint(const std::string& path, bool gather) {
  if (!is_sharded_checkpoint(path)) return {path, read_checkpoint(path), std::nullopt};
  const std::string step_dir = step_dir_of(path);
  Manifest manifest = read_manifest(path);
  if (gather) return {path, gather_sharded_state(manifest, step_dir), std::nullopt};
  check_shard_files(manifest, step_dir);
  CheckpointState shared = read_shared_state(manifest, step_dir);
  return {path, std::move(shared), std::move(manifest)};
}

LoadedCheckpoint find_latest_valid(const std::string& dir, const WarningSink& warn, bool gather) {
  const std::vector<CheckpointEntry> entries = list_checkpoints(dir);
  if (entries.empty()) fail("no checkpoints in ", dir);
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    try {
      return open_checkpoint(entry->path, gather);
    } catch (const Error& error) {
      if (warn) warn(std::string(error.what()) + "; skipping it");
    }
  }
  fail("no valid checkpoints in ", dir, ": all ", entries.size(), " are damaged");
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep) {
  ALLOY_CHECK(keep >= 1, "checkpoints to keep must be at least 1, got ", keep);
  const std::vector<CheckpointEntry> entries = list_checkpoints(dir);
  std::vector<std::string> removed;
  const std::size_t excess = entries.size() > static_cast<std::size_t>(keep)
                                 ? entries.size() - static_cast<std::size_t>(keep)
                                 : 0;
  for (std::size_t i = 0; i < excess; ++i) {
    // Another process pruning the same directory may have removed it first.
    remove_checkpoint(entries[i]);
    removed.push_back(entries[i].path);
  }
  return removed;
}

}  // namespace alloy::checkpoint
