#include "parallel/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>

#include "core/error.h"

namespace alloy::parallel {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // nothing useful to do when close fails: the fd is gone anyway
  fd_ = fd;
}

std::string endpoint_str(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string errno_str(int error) {
  std::string text = std::strerror(error);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string seconds_str(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000.0 << " s";
  return out.str();
}

namespace {

using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddressList resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (status != 0) {
    fail("cannot resolve '", host,
         "': ", status == EAI_SYSTEM ? errno_str(errno) : std::string(gai_strerror(status)));
  }
  return AddressList(found, &freeaddrinfo);
}

int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
}

void set_blocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK) < 0) {
    fail("fcntl on a socket failed: ", errno_str(errno));
  }
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, poll_ms(deadline));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) fail("poll failed: ", errno_str(errno));
    if (ready == 0 && Clock::now() >= deadline) return false;
  }
}

// Connects one resolved address; returns 0 or the errno of the failure.
int try_connect(const addrinfo& address, Clock::time_point deadline, UniqueFd& out) {
  UniqueFd socket(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                           address.ai_protocol));
  if (!socket.valid()) return errno;
  if (::connect(socket.get(), address.ai_addr, address.ai_addrlen) < 0) {
    if (errno != EINPROGRESS) return errno;
    if (!wait_ready(socket.get(), POLLOUT, deadline)) return ETIMEDOUT;
    int error = 0;
    socklen_t length = sizeof error;
    if (getsockopt(socket.get(), SOL_SOCKET, SO_ERROR, &error, &length) < 0) return errno;
    if (error != 0) return error;
  }
  set_blocking(socket.get(), true);
  const int on = 1;
  // Store requests are small request/response exchanges: do not let Nagle delay them.
  if (setsockopt(socket.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) < 0) return errno;
  out = std::move(socket);
  return 0;
}

}  // namespace

UniqueFd listen_tcp(const std::string& host, int port) {
  const std::string where = endpoint_str(host, port);
  AddressList addresses(nullptr, &freeaddrinfo);
  try {
    addresses = resolve(host, port, true);
  } catch (const Error& error) {
    fail("cannot listen on ", where, ": ", error.what());
  }
  const addrinfo& address = *addresses;
  UniqueFd socket(
      ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol));
  if (!socket.valid()) fail("cannot listen on ", where, ": socket: ", errno_str(errno));
  const int on = 1;
  // Lets a restarted job reuse the port while the last run's connections sit in TIME_WAIT; a
  // port with a live listener still fails with EADDRINUSE.
  if (setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) < 0) {
    fail("cannot listen on ", where, ": setsockopt: ", errno_str(errno));
  }
  if (::bind(socket.get(), address.ai_addr, address.ai_addrlen) < 0) {
    const int error = errno;
    fail("cannot listen on ", where, ": ", errno_str(error),
         error == EADDRNOTAVAIL ? " (the master address must belong to the node of rank 0)" : "");
  }
  if (::listen(socket.get(), SOMAXCONN) < 0) {
    fail("cannot listen on ", where, ": ", errno_str(errno));
  }
  return socket;
}

UniqueFd connect_tcp(const std::string& host, int port, Clock::time_point deadline) {
  const AddressList addresses = resolve(host, port, false);
  int error = EADDRNOTAVAIL;
  for (const addrinfo* address = addresses.get(); address != nullptr; address = address->ai_next) {
    UniqueFd socket;
    error = try_connect(*address, deadline, socket);
    if (error == 0) return socket;
  }
  fail(errno_str(error));
}

int local_port(const UniqueFd& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(socket.get(), reinterpret_cast<sockaddr*>(&address), &length) < 0) {
    fail("getsockname failed: ", errno_str(errno));
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

std::string local_host(const UniqueFd& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(socket.get(), reinterpret_cast<sockaddr*>(&address), &length) < 0) {
    fail("getsockname failed: ", errno_str(errno));
  }
  char host[NI_MAXHOST];
  const int status = getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host,
                                 sizeof host, nullptr, 0, NI_NUMERICHOST);
  if (status != 0) fail("getnameinfo failed: ", gai_strerror(status));
  return host;
}

void send_all(const UniqueFd& socket, const void* data, std::size_t size, const std::string& peer) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(socket.get(), bytes, size, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      fail("cannot send to ", peer, ": ", errno_str(errno));
    }
    bytes += sent;
    size -= static_cast<std::size_t>(sent);
  }
}

bool recv_all(const UniqueFd& socket, void* data, std::size_t size, Clock::time_point deadline,
              const std::string& peer) {
  char* bytes = static_cast<char*>(data);
  std::size_t received = 0;
  while (received < size) {
    if (!wait_ready(socket.get(), POLLIN, deadline)) {
      fail("no answer from ", peer, " before the deadline");
    }
    const ssize_t got = ::recv(socket.get(), bytes + received, size - received, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("cannot read from ", peer, ": ", errno_str(errno));
    }
    if (got == 0) {
      if (received == 0) return false;
      fail(peer, " closed the connection in the middle of a message");
    }
    received += static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace alloy::parallel
