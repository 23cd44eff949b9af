#include "apps/train/stop_signals.h"

#include <signal.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace alloy::app {

namespace {

volatile sig_atomic_t g_signal = 0;
struct sigaction g_previous_term;
struct sigaction g_previous_int;

extern "C" void on_stop_signal(int signal) {
  g_signal = signal;
}

void install(int signal, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESETHAND: a second signal takes the default action; SA_RESTART: blocking calls of
  // the loader and the file writes go on after the first.
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  if (::sigaction(signal, &action, previous) != 0) {
    fail("cannot install the ", StopSignals::name(signal), " handler: ", std::strerror(errno));
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  install(SIGTERM, &g_previous_term);
  install(SIGINT, &g_previous_int);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
}

bool StopSignals::requested() const {
  return g_signal != 0;
}

int StopSignals::signal() const {
  return g_signal;
}

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

}  // namespace alloy::app
