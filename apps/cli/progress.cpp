#include "apps/cli/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace alloy::app {

namespace {
constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
}  // namespace

bool ProgressBar::enabled() {
  static const bool on = [] {
    const char* term = std::getenv("TERM");
    return isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
  }();
  return on;
}

ProgressBar::ProgressBar(std::string label, std::int64_t total)
    : label_(std::move(label)), total_(total), enabled_(enabled()) {}

ProgressBar::~ProgressBar() {
  clear();
}

void ProgressBar::update(std::int64_t done, const std::function<std::string()>& status) {
  if (!enabled_ || total_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total_ && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  drawn_ = true;
  const int filled = static_cast<int>(kBarWidth * done / total_);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld  %s", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), status().c_str());
  std::fflush(stderr);
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace alloy::app
