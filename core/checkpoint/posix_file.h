// Checked POSIX file I/O for checkpoints: an owning descriptor, whole-buffer reads and writes,
// and the write-temp, fsync, rename, fsync-directory sequence that makes a file appear whole
// or not at all. Every failure is an alloy::Error naming the path and strerror(errno).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace alloy::checkpoint {

// Owns one file descriptor; the destructor closes it without checking (close() checks).
class FileDescriptor {
 public:
  FileDescriptor() = default;
  FileDescriptor(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  bool valid() const { return fd_ >= 0; }
  int get() const { return fd_; }
  const std::string& path() const { return path_; }

  void write_all(std::string_view bytes) const;
  // Reads until `size` bytes or end of file; returns how many arrived.
  std::size_t read_up_to(void* data, std::size_t size) const;
  // The same from byte `offset` of the file, leaving the file position alone.
  std::size_t read_up_to_at(void* data, std::size_t size, std::uint64_t offset) const;
  void sync() const;
  void close();

 private:
  int fd_ = -1;
  std::string path_;
};

// Opens `path` or throws.
FileDescriptor open_or_fail(const std::string& path, int flags, unsigned mode = 0);

// Writes the concatenation of `parts` to "<path>.tmp-<pid>", fsyncs it, renames it over `path`
// and fsyncs the directory, so that a crash at any moment leaves either the old file or the
// new one. The temporary file is removed when anything fails.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace alloy::checkpoint
