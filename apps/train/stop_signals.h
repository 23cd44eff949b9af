// SIGTERM and SIGINT as a request to stop (cluster preemption, Ctrl-C): while a StopSignals
// lives, the first such signal only sets a flag that the training loop polls after each step,
// so the step finishes and a checkpoint is saved. The handler resets itself, so a second
// signal ends the process the default way at once (an atomic save leaves no damaged file).
#pragma once

namespace alloy::app {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;
  // The signal that asked, 0 when none did.
  int signal() const;
  // "SIGTERM", "SIGINT".
  static const char* name(int signal);
};

}  // namespace alloy::app
