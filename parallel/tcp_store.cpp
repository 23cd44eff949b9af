#include "parallel/tcp_store.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "core/error.h"

namespace alloy::parallel {
namespace {

enum class Command : std::uint8_t { hello = 1, bye = 2, set = 3, get = 4, wait = 5 };
enum class Status : std::uint8_t { ok = 0, timeout = 1, refused = 2 };

// Anything longer is not a store message: a stray client speaking some other protocol.
constexpr std::uint32_t kMaxMessage = 64u << 20;
// How much longer than the server-side wait a client waits for the answer to arrive.
constexpr std::chrono::seconds kReplySlack{5};

std::uint32_t decode_u32(const char* bytes) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

std::uint32_t clamp_ms(std::chrono::milliseconds duration) {
  return static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(duration.count(), 0, std::numeric_limits<std::uint32_t>::max()));
}

// Builds one framed message: the length prefix, a command or status byte, then fields.
class Writer {
 public:
  template <class Kind>
  explicit Writer(Kind kind) : bytes_(4, '\0') {
    bytes_.push_back(static_cast<char>(kind));
  }
  Writer& u32(std::uint32_t value) {
    for (int i = 0; i < 4; ++i)
      bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
    return *this;
  }
  Writer& str(std::string_view text) {
    u32(static_cast<std::uint32_t>(text.size()));
    bytes_.append(text);
    return *this;
  }
  std::string finish() {
    const auto length = static_cast<std::uint32_t>(bytes_.size() - 4);
    for (int i = 0; i < 4; ++i)
      bytes_[i] = static_cast<char>((length >> (8 * i)) & 0xffu);
    return std::move(bytes_);
  }

 private:
  std::string bytes_;
};

// Reads the fields of one message body; a truncated body is an error.
class Reader {
 public:
  explicit Reader(const std::string& body) : body_(body) {}
  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(body_[position_++]);
  }
  std::uint32_t u32() {
    need(4);
    const std::uint32_t value = decode_u32(body_.data() + position_);
    position_ += 4;
    return value;
  }
  std::string str() {
    const std::uint32_t length = u32();
    need(length);
    std::string text = body_.substr(position_, length);
    position_ += length;
    return text;
  }

 private:
  void need(std::size_t bytes) const {
    if (body_.size() - position_ < bytes) fail("malformed store message");
  }

  const std::string& body_;
  std::size_t position_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Server: one thread polls the listener, every client and a wake-up pipe. Requests are answered
// in order; get and wait park a waiter that is answered when its keys are set or at its deadline.

class TcpStoreServer::Impl {
 public:
  Impl(const std::string& host, int port) : listener_(listen_tcp(host, port)) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) < 0) fail("cannot create a pipe: ", errno_str(errno));
    wake_read_.reset(pipe_fds[0]);
    wake_write_.reset(pipe_fds[1]);
    port_ = local_port(listener_);
    thread_ = std::thread([this] { serve(); });
  }

  ~Impl() {
    const char stop = 0;
    while (::write(wake_write_.get(), &stop, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }

  int port() const { return port_; }

  bool wait_for_ranks_to_leave(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(ranks_mutex_);
    return ranks_changed_.wait_for(lock, timeout, [this] { return connected_ranks_ == 0; });
  }

 private:
  struct Client {
    std::uint64_t id = 0;
    UniqueFd socket;
    std::string inbox;  // bytes received but not yet a whole message
    int rank = -1;      // set by hello
    bool said_bye = false;
    bool broken = false;  // to be dropped at the end of this round
  };
  struct Waiter {
    std::uint64_t client = 0;
    std::vector<std::string> keys;
    Clock::time_point deadline;
    bool wants_value = false;  // get (answers with the value) rather than wait
  };

  void serve() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> ids;
    while (true) {
      fds = {{wake_read_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
      ids.clear();
      for (const auto& client : clients_) {
        fds.push_back({client->socket.get(), POLLIN, 0});
        ids.push_back(client->id);
      }
      if (::poll(fds.data(), fds.size(), poll_timeout()) < 0) {
        if (errno == EINTR) continue;
        // Unrecoverable; closing every connection makes clients fail now rather than time out.
        clients_.clear();
        publish_connected_ranks();
        return;
      }
      if (fds[0].revents != 0) return;
      for (std::size_t i = 2; i < fds.size(); ++i) {
        Client* client = find(ids[i - 2]);
        if (fds[i].revents != 0 && client != nullptr && !receive(*client)) client->broken = true;
      }
      if (fds[1].revents & POLLIN) accept_client();
      expire_waiters();
      drop_broken();
    }
  }

  void accept_client() {
    UniqueFd socket(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!socket.valid()) return;  // the peer gave up already, or fds ran out: it will retry
    const int on = 1;
    setsockopt(socket.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // latency only
    auto client = std::make_unique<Client>();
    client->id = next_id_++;
    client->socket = std::move(socket);
    clients_.push_back(std::move(client));
  }

  // Reads what arrived and handles every whole message; false when the client must go.
  bool receive(Client& client) {
    char buffer[65536];
    const ssize_t got = ::recv(client.socket.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (got < 0) return errno == EINTR || errno == EAGAIN;
    if (got == 0) return false;
    client.inbox.append(buffer, static_cast<std::size_t>(got));
    while (client.inbox.size() >= 4 && !client.broken) {
      const std::uint32_t length = decode_u32(client.inbox.data());
      if (length == 0 || length > kMaxMessage) return false;
      if (client.inbox.size() < 4 + std::size_t{length}) break;
      const std::string body = client.inbox.substr(4, length);
      client.inbox.erase(0, 4 + std::size_t{length});
      try {
        handle(client, body);
      } catch (const Error&) {
        return false;  // a malformed message: this is not one of our clients
      }
    }
    return !client.broken;
  }

  void handle(Client& client, const std::string& body) {
    Reader in(body);
    switch (static_cast<Command>(in.u8())) {
      case Command::hello: {
        const int rank = static_cast<int>(in.u32());
        for (const auto& other : clients_) {
          if (other.get() != &client && other->rank == rank && !other->broken) {
            reply(client, Writer(Status::refused)
                              .str("rank " + std::to_string(rank) +
                                   " has already joined from another process (were two "
                                   "processes started with the same rank?)")
                              .finish());
            return;
          }
        }
        client.rank = rank;
        publish_connected_ranks();
        reply(client, Writer(Status::ok).finish());
        return;
      }
      case Command::bye:
        client.said_bye = true;
        return;
      case Command::set: {
        std::string key = in.str();
        data_[std::move(key)] = in.str();
        reply(client, Writer(Status::ok).finish());
        satisfy_waiters();
        return;
      }
      case Command::get:
      case Command::wait: {
        Waiter waiter;
        waiter.client = client.id;
        waiter.wants_value = static_cast<Command>(body[0]) == Command::get;
        waiter.deadline = Clock::now() + std::chrono::milliseconds(in.u32());
        const std::uint32_t count = waiter.wants_value ? 1 : in.u32();
        for (std::uint32_t i = 0; i < count; ++i)
          waiter.keys.push_back(in.str());
        waiters_.push_back(std::move(waiter));
        satisfy_waiters();
        return;
      }
    }
    fail("unknown store command");
  }

  void reply(Client& client, const std::string& message) {
    try {
      send_all(client.socket, message.data(), message.size(), "a store client");
    } catch (const Error&) {
      client.broken = true;
    }
  }

  bool all_set(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [this](const std::string& key) { return data_.count(key) > 0; });
  }

  void satisfy_waiters() {
    for (std::size_t i = 0; i < waiters_.size();) {
      Client* client = find(waiters_[i].client);
      if (client == nullptr || !all_set(waiters_[i].keys)) {
        ++i;
        continue;
      }
      Writer answer(Status::ok);
      if (waiters_[i].wants_value) answer.str(data_.at(waiters_[i].keys[0]));
      reply(*client, answer.finish());
      waiters_.erase(waiters_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  void expire_waiters() {
    const auto now = Clock::now();
    for (std::size_t i = 0; i < waiters_.size();) {
      Client* client = find(waiters_[i].client);
      if (client != nullptr && waiters_[i].deadline > now) {
        ++i;
        continue;
      }
      if (client != nullptr) {
        Writer answer(Status::timeout);
        if (!waiters_[i].wants_value) {
          std::vector<std::string> missing;
          for (const auto& key : waiters_[i].keys) {
            if (data_.count(key) == 0) missing.push_back(key);
          }
          answer.u32(static_cast<std::uint32_t>(missing.size()));
          for (const auto& key : missing)
            answer.str(key);
        }
        reply(*client, answer.finish());
      }
      waiters_.erase(waiters_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // Dropping a ranked client records its departure, which may answer waiters, whose replies
  // may break further clients: repeat until none is left broken.
  void drop_broken() {
    while (true) {
      const auto broken = std::find_if(clients_.begin(), clients_.end(),
                                       [](const auto& client) { return client->broken; });
      if (broken == clients_.end()) return;
      const std::unique_ptr<Client> client = std::move(*broken);
      clients_.erase(broken);
      if (client->rank >= 0) {
        publish_connected_ranks();
        data_[kDepartedKey] +=
            std::to_string(client->rank) + (client->said_bye ? " left\n" : " lost\n");
        satisfy_waiters();
      }
    }
  }

  // Tells wait_for_ranks_to_leave how many connections that joined as a rank are open.
  void publish_connected_ranks() {
    const auto ranked = std::count_if(clients_.begin(), clients_.end(),
                                      [](const auto& client) { return client->rank >= 0; });
    const std::lock_guard<std::mutex> lock(ranks_mutex_);
    connected_ranks_ = static_cast<int>(ranked);
    ranks_changed_.notify_all();
  }

  Client* find(std::uint64_t id) const {
    for (const auto& client : clients_) {
      if (client->id == id) return client->broken ? nullptr : client.get();
    }
    return nullptr;
  }

  int poll_timeout() const {
    if (waiters_.empty()) return -1;
    auto earliest = waiters_.front().deadline;
    for (const auto& waiter : waiters_)
      earliest = std::min(earliest, waiter.deadline);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(earliest - Clock::now());
    return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60'000));
  }

  UniqueFd listener_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  int port_ = 0;
  // Serving state, touched only by the serving thread.
  std::map<std::string, std::string> data_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<Waiter> waiters_;
  std::uint64_t next_id_ = 0;
  // Connections that joined as a rank and are still open, for wait_for_ranks_to_leave.
  std::mutex ranks_mutex_;
  std::condition_variable ranks_changed_;
  int connected_ranks_ = 0;
  std::thread thread_;  // last: starts after everything it uses exists
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port)
    : impl_(std::make_unique<Impl>(host, port)) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const {
  return impl_->port();
}

bool TcpStoreServer::wait_for_ranks_to_leave(std::chrono::milliseconds timeout) {
  return impl_->wait_for_ranks_to_leave(timeout);
}

// ---------------------------------------------------------------------------------------------
// Client

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : endpoint_(endpoint_str(host, port)), timeout_(timeout) {
  const auto deadline = Clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    std::string reason;
    try {
      socket_ = connect_tcp(host, port, deadline);
      return;
    } catch (const Error& error) {
      reason = error.what();
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      fail("cannot reach the master at ", endpoint_, " after ", seconds_str(timeout), ": ", reason);
    }
    // The master may simply not be up yet: other ranks often start first.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

TcpStore::~TcpStore() {
  // Best effort: the master may be gone already, and a destructor must not throw.
  try {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::string bye = Writer(Command::bye).finish();
    send_all(socket_, bye.data(), bye.size(), endpoint_);
  } catch (const Error&) {
  }
}

std::string TcpStore::request(const std::string& message, std::chrono::milliseconds server_wait) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const std::string peer = "the master at " + endpoint_;
  send_all(socket_, message.data(), message.size(), peer);
  const auto deadline = Clock::now() + server_wait + kReplySlack;
  char header[4];
  if (!recv_all(socket_, header, sizeof header, deadline, peer)) {
    fail("lost the connection to ", peer);
  }
  const std::uint32_t length = decode_u32(header);
  if (length == 0 || length > kMaxMessage) fail("malformed reply from ", peer);
  std::string body(length, '\0');
  if (!recv_all(socket_, body.data(), body.size(), deadline, peer)) {
    fail("lost the connection to ", peer);
  }
  return body;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  const std::string body =
      request(Writer(Command::set).str(key).str({value.data(), value.size()}).finish(),
              std::chrono::milliseconds(0));
  if (Reader(body).u8() != static_cast<std::uint8_t>(Status::ok)) {
    fail("the master at ", endpoint_, " refused to store '", key, "'");
  }
}

std::optional<std::vector<char>> TcpStore::try_get(const std::string& key,
                                                   std::chrono::milliseconds timeout) {
  const std::string body =
      request(Writer(Command::get).u32(clamp_ms(timeout)).str(key).finish(), timeout);
  Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::ok) return std::nullopt;
  const std::string value = in.str();
  return std::vector<char>(value.begin(), value.end());
}

std::vector<char> TcpStore::get(const std::string& key) {
  auto value = try_get(key, timeout_);
  if (!value) {
    fail("timed out after ", seconds_str(timeout_), " waiting for '", key, "' in the store at ",
         endpoint_);
  }
  return std::move(*value);
}

std::vector<std::string> TcpStore::missing_after(const std::vector<std::string>& keys,
                                                 std::chrono::milliseconds timeout) {
  Writer message(Command::wait);
  message.u32(clamp_ms(timeout)).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys)
    message.str(key);
  const std::string body = request(message.finish(), timeout);
  Reader in(body);
  std::vector<std::string> missing;
  if (static_cast<Status>(in.u8()) == Status::timeout) {
    const std::uint32_t count = in.u32();
    for (std::uint32_t i = 0; i < count; ++i)
      missing.push_back(in.str());
  }
  return missing;
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  // Gloo passes zero for "no timeout of its own".
  const auto limit = timeout.count() > 0 ? timeout : timeout_;
  const auto missing = missing_after(keys, limit);
  if (!missing.empty()) {
    std::string names;
    for (const auto& key : missing)
      names += (names.empty() ? "'" : ", '") + key + "'";
    fail("timed out after ", seconds_str(limit), " waiting for ", names, " in the store at ",
         endpoint_);
  }
}

void TcpStore::join_as(int rank) {
  const std::string body =
      request(Writer(Command::hello).u32(static_cast<std::uint32_t>(rank)).finish(),
              std::chrono::milliseconds(0));
  Reader in(body);
  if (static_cast<Status>(in.u8()) == Status::refused) fail(in.str());
}

std::string describe_departures(TcpStore& store, std::chrono::milliseconds timeout,
                                const std::string& master) {
  try {
    // A rank that died a moment ago may not be recorded yet: give the master a moment.
    const auto wait = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(1));
    const auto record = store.try_get(kDepartedKey, wait);
    if (!record) {
      return "every rank is still connected (a peer may be stalled; timeout " +
             seconds_str(timeout) + ")";
    }
    std::istringstream lines(std::string(record->begin(), record->end()));
    std::string text;
    int rank = 0;
    std::string how;
    while (lines >> rank >> how) {
      text += text.empty() ? "" : ", ";
      text += how == "lost" ? detail::concat("rank ", rank, " was lost (its process died)")
                            : detail::concat("rank ", rank, " left the group");
    }
    return text;
  } catch (const Error&) {
    return "rank 0 is gone (its rendezvous store at " + master + " is unreachable)";
  }
}

}  // namespace alloy::parallel
