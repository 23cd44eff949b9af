// A one-line progress bar on standard error, drawn only when standard error is a terminal so
// logs and pipes stay clean. Redraws are rate-limited; the line is cleared when done.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace alloy::app {

class ProgressBar {
 public:
  // `label` prefixes the bar ("epoch 3/10"); `total` is the number of steps.
  ProgressBar(std::string label, std::int64_t total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` steps finished; `status()` follows the bar ("loss 0.5123  6100 img/s"). It is
  // called only when the bar is redrawn (at most every 100 ms), since it may wait for a device.
  void update(std::int64_t done, const std::function<std::string()>& status);

  // Whether bars are drawn at all in this process.
  static bool enabled();

 private:
  void clear();

  std::string label_;
  std::int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace alloy::app
