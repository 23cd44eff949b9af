// Error types and checks. Every failure is an exception carrying a message that says what
// failed and on what; the command line catches them once and maps them to exit codes.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace alloy {

// Any failure that is not the user's misuse of the command line (exit status 1).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A device allocation that the device's memory cannot satisfy, even after the caching allocator
// has given its cached blocks back (exit status 1, like any Error). Its own type so that
// `alloy mem --max-batch` can tell "this batch does not fit" from every other failure.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& message) : Error(message) {}
};

// A bad option or option value (exit status 2).
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message) {}
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}
}  // namespace detail

// Builds a message from streamable parts: fail("bad shape ", shape).
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(detail::concat(std::forward<Parts>(parts)...));
}

template <class... Parts>
[[noreturn]] void usage_fail(Parts&&... parts) {
  throw UsageError(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace alloy

// Checks an invariant and throws alloy::Error with the given message parts when it fails.
#define ALLOY_CHECK(condition, ...)               \
  do {                                            \
    if (!(condition)) ::alloy::fail(__VA_ARGS__); \
  } while (0)
