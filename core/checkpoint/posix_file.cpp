#include "core/checkpoint/posix_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace alloy::checkpoint {

namespace {

[[noreturn]] void fail_errno(const char* action, const std::string& path) {
  fail("cannot ", action, " ", path, ": ", std::strerror(errno));
}

// Removes the temporary file unless the rename has consumed it.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

FileDescriptor::FileDescriptor(FileDescriptor&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void FileDescriptor::write_all(std::string_view bytes) const {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      fail_errno("write", path_);
    }
    bytes.remove_prefix(static_cast<std::size_t>(written));
  }
}

namespace {

// Reads until `size` bytes or end of file, from the file position (`offset` negative) or from
// `offset`.
std::size_t read_loop(int fd, const std::string& path, void* data, std::size_t size,
                      std::int64_t offset) {
  std::size_t done = 0;
  while (done < size) {
    char* into = static_cast<char*>(data) + done;
    const ssize_t got = offset < 0 ? ::read(fd, into, size - done)
                                   : ::pread(fd, into, size - done,
                                             static_cast<off_t>(offset) + static_cast<off_t>(done));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno("read", path);
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

}  // namespace

std::size_t FileDescriptor::read_up_to(void* data, std::size_t size) const {
  return read_loop(fd_, path_, data, size, -1);
}

std::size_t FileDescriptor::read_up_to_at(void* data, std::size_t size,
                                          std::uint64_t offset) const {
  return read_loop(fd_, path_, data, size, static_cast<std::int64_t>(offset));
}

void FileDescriptor::sync() const {
  while (::fsync(fd_) != 0) {
    if (errno != EINTR) fail_errno("fsync", path_);
  }
}

void FileDescriptor::close() {
  const int fd = fd_;
  fd_ = -1;
  // Linux releases the descriptor even when close() reports EINTR, so it is not retried.
  if (::close(fd) != 0 && errno != EINTR) fail_errno("close", path_);
}

FileDescriptor open_or_fail(const std::string& path, int flags, unsigned mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail_errno("open", path);
  return FileDescriptor(fd, path);
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& parts) {
  std::string directory = std::filesystem::path(path).parent_path().string();
  if (directory.empty()) directory = ".";

  TemporaryFile temporary(path + ".tmp-" + std::to_string(::getpid()));
  FileDescriptor file = open_or_fail(temporary.path(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (const auto part : parts)
    file.write_all(part);
  file.sync();
  file.close();

  if (::rename(temporary.path().c_str(), path.c_str()) != 0) {
    fail("cannot rename ", temporary.path(), " to ", path, ": ", std::strerror(errno));
  }
  temporary.release();

  // The rename itself is durable only once the directory entry is on disk.
  FileDescriptor dir = open_or_fail(directory, O_RDONLY | O_DIRECTORY);
  dir.sync();
  dir.close();
}

}  // namespace alloy::checkpoint
