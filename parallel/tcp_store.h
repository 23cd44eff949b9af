// The key-value store that ranks meet through. Rank 0 runs a TcpStoreServer on the master
// address; every rank, rank 0 included, talks to it through a TcpStore, which is the
// gloo::rendezvous::Store that Gloo's full-mesh connection uses (Gloo ships only file, hash and
// Redis stores). The server also records ranks whose connection closes, so that a failed
// collective can name the rank that is gone.
//
// Wire format: each message is a little-endian u32 length and that many bytes; a request is a
// command byte and its fields, a reply a status byte and its fields; strings are u32-length
// prefixed. The server waits for keys itself and answers a wait at its deadline at the latest.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "parallel/socket.h"

namespace alloy::parallel {

// The server appends one line per departed rank to this key: "RANK left" when the rank closed
// its store cleanly, "RANK lost" when its connection dropped (its process died).
inline constexpr const char* kDepartedKey = "alloy/departed";

class TcpStore;

// What `store` knows about ranks that are gone, for the message of a failed collective:
// "rank 1 was lost (its process died)", that every rank is still connected, or that rank 0's
// store at `master` is unreachable. Waits up to min(timeout, 1 s) for a record to appear.
std::string describe_departures(TcpStore& store, std::chrono::milliseconds timeout,
                                const std::string& master);

class TcpStoreServer {
 public:
  // Serves on host:port (0 picks a free port) from a thread of its own until destroyed.
  // Throws "cannot listen on HOST:PORT: REASON", e.g. when the port is in use.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;

  // Waits up to `timeout` until every connection that joined as a rank has closed (said bye or
  // dropped); false if some are still open. Rank 0 calls it before its server goes, so that a
  // peer still reading the store at the end (the last gather) is not cut off.
  bool wait_for_ranks_to_leave(std::chrono::milliseconds timeout);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStore : public gloo::rendezvous::Store {
 public:
  // Connects to the server at host:port, retrying with backoff while the master is not up yet;
  // after `timeout` throws "cannot reach the master at HOST:PORT after N s: REASON". The same
  // timeout bounds get() and wait() when Gloo gives none.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout);
  // Says goodbye, so the server records that this rank left rather than was lost.
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  // Waits up to the store's timeout for the key, then throws naming it.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The value once the key is set, or nothing when it is not set within `timeout`.
  std::optional<std::vector<char>> try_get(const std::string& key,
                                           std::chrono::milliseconds timeout);
  // The keys still unset after waiting up to `timeout` for all of them; empty when all are set.
  std::vector<std::string> missing_after(const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout);
  // Registers this connection as `rank`, so that the server can report the rank when the
  // connection closes. Throws when a live connection already registered the same rank.
  void join_as(int rank);

  // "HOST:PORT" of the server.
  const std::string& endpoint() const { return endpoint_; }
  // The local address of the connection: the interface through which this node reaches the
  // master, and so the one its peers can reach it through.
  std::string local_address() const { return local_host(socket_); }

 private:
  std::string request(const std::string& message, std::chrono::milliseconds server_wait);

  std::mutex mutex_;  // one request in flight per connection
  UniqueFd socket_;
  std::string endpoint_;
  std::chrono::milliseconds timeout_;
};

}  // namespace alloy::parallel
