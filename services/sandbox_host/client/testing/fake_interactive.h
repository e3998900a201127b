// A scripted interactive process for the scheduler's unit tests (FakeHost::StartInteractive): what the process
// prints in answer to each write is the test's script — a persistent tool's driver, an MCP server, the
// environment relay — and a read waits on the test's FakeClock until its marker comes, the process ends or the
// deadline passes, as InteractiveCall does on a real host. Started with an observer (ExecObserver.on_event), it
// also reports as a real host does: `started` with its pid, its output as stdout, its exit, then the call's end.
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "libs/core/clock.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::sandbox {

class FakeInteractive final : public InteractiveProcess {
 public:
  // What the process does, called outside its lock: on each write, and on each signal. Each may Emit output,
  // Exit, or do nothing (a hang; a signal ignored). Either may be empty.
  struct Script {
    std::function<void(FakeInteractive& process, const std::string& written)> on_write;
    std::function<void(FakeInteractive& process, int signal)> on_signal;
  };
  FakeInteractive(Clock* clock, v1::ExecRequest start, Script script, ExecObserver observer = {}, int pid = 0);

  // --- what the script does
  void Emit(std::string text);
  // The process exits with `code`: a read sees what is left and `ended`.
  void Exit(int code = 0);
  // A signal ends it (its exit has the signal, reason SIGNALED).
  void KillWith(int signal);

  // --- what the test observes
  const v1::ExecRequest& start() const { return start_; }
  std::string env(const std::string& name) const;  // a variable it was started with ("" when unset)
  std::vector<std::string> writes() const;
  std::vector<int> signals() const;
  bool stopped() const;  // Stop() was called (by the attempt)
  bool stdin_closed() const;
  bool ended() const;

  // --- InteractiveProcess
  void Write(std::string data) override;
  void Signal(int signal) override;
  void CloseStdin() override;
  void Stop() override;
  boost::asio::awaitable<Output> ReadUntil(const std::string& marker, absl::Time deadline) override;

 private:
  using Wake = boost::asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  void WakeReader() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the process (once) and tells the observer how.
  void End(v1::ExitStatus exit);

  Clock* const clock_;
  const v1::ExecRequest start_;
  const Script script_;
  const ExecObserver observer_;
  mutable absl::Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool stdin_closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> writes_ ABSL_GUARDED_BY(mu_);
  std::vector<int> signals_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Wake> wake_ ABSL_GUARDED_BY(mu_);  // the waiting reader's, while one waits
};

}  // namespace corral::sandbox
