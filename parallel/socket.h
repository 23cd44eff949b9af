// TCP sockets for the rendezvous store: an owning descriptor and the few blocking calls with a
// deadline that the store needs. Every failed system call becomes an alloy::Error that names
// the address and the system's reason.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace alloy::parallel {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor and closes it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port", or "[v6]:port" for an IPv6 literal.
std::string endpoint_str(const std::string& host, int port);

// strerror(error) starting lower-case, to read well inside a sentence.
std::string errno_str(int error);

// "2 s", "0.5 s": a duration as people read it in messages.
std::string seconds_str(std::chrono::milliseconds duration);

// Listens on host:port (port 0: any free port). Throws "cannot listen on HOST:PORT: REASON".
UniqueFd listen_tcp(const std::string& host, int port);

// One attempt to connect to host:port, giving up at `deadline`. Throws alloy::Error with the
// system's reason; the caller decides whether to retry.
UniqueFd connect_tcp(const std::string& host, int port, Clock::time_point deadline);

// The port a socket is bound to, and the numeric address of its local end.
int local_port(const UniqueFd& socket);
std::string local_host(const UniqueFd& socket);

// Sends every byte (no SIGPIPE: a closed peer is an error). `peer` names the other end.
void send_all(const UniqueFd& socket, const void* data, std::size_t size, const std::string& peer);

// Receives exactly `size` bytes before `deadline`. Returns false when the peer closed the
// connection before sending the first byte; throws on a timeout, an error, or a close midway.
bool recv_all(const UniqueFd& socket, void* data, std::size_t size, Clock::time_point deadline,
              const std::string& peer);

}  // namespace alloy::parallel
