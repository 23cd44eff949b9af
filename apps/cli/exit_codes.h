// Exit statuses of the command-line contract.
#pragma once

namespace alloy::app {

constexpr int kExitSuccess = 0;
constexpr int kExitFailure = 1;  // anything but misuse: bad data, I/O, numerical failure
constexpr int kExitUsage = 2;    // bad option or option value

}  // namespace alloy::app
