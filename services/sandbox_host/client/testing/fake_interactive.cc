#include "services/sandbox_host/client/testing/fake_interactive.h"

#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/async/sleep.h"

namespace corral::sandbox {

namespace asio = boost::asio;

FakeInteractive::FakeInteractive(Clock* clock, v1::ExecRequest start, Script script, ExecObserver observer, int pid)
    : clock_(clock), start_(std::move(start)), script_(std::move(script)), observer_(std::move(observer)) {
  if (observer_.on_event) {
    v1::ExecEvent started;
    started.mutable_started()->set_pid(pid);
    observer_.on_event(started);
  }
}

void FakeInteractive::WakeReader() {
  if (wake_ != nullptr) wake_->try_send(boost::system::error_code());
}

void FakeInteractive::Emit(std::string text) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    output_ += text;
    WakeReader();
  }
  if (!observer_.on_event) return;
  v1::ExecEvent event;
  event.set_stdout(std::move(text));
  observer_.on_event(event);
}

void FakeInteractive::End(v1::ExitStatus exit) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    WakeReader();
  }
  if (observer_.on_event) {
    v1::ExecEvent event;
    *event.mutable_exited() = std::move(exit);
    observer_.on_event(event);
  }
  if (observer_.on_done) observer_.on_done(absl::OkStatus());
}

void FakeInteractive::Exit(int code) {
  v1::ExitStatus exit;
  exit.set_exit_code(code);
  exit.set_reason(v1::EXIT_REASON_EXITED);
  End(std::move(exit));
}

void FakeInteractive::KillWith(int signal) {
  v1::ExitStatus exit;
  exit.set_signal(signal);
  exit.set_reason(v1::EXIT_REASON_SIGNALED);
  End(std::move(exit));
}

std::string FakeInteractive::env(const std::string& name) const {
  auto it = start_.command().env().find(name);
  return it == start_.command().env().end() ? "" : it->second;
}

std::vector<std::string> FakeInteractive::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

std::vector<int> FakeInteractive::signals() const {
  absl::MutexLock lock(&mu_);
  return signals_;
}

bool FakeInteractive::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

bool FakeInteractive::stdin_closed() const {
  absl::MutexLock lock(&mu_);
  return stdin_closed_;
}

bool FakeInteractive::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void FakeInteractive::Write(std::string data) {
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;  // a write to a process that is gone goes nowhere
    writes_.push_back(data);
  }
  if (script_.on_write) script_.on_write(*this, data);
}

void FakeInteractive::Signal(int signal) {
  {
    absl::MutexLock lock(&mu_);
    signals_.push_back(signal);
  }
  if (script_.on_signal) script_.on_signal(*this, signal);
}

void FakeInteractive::CloseStdin() {
  absl::MutexLock lock(&mu_);
  stdin_closed_ = true;
}

void FakeInteractive::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    if (ended_) return;
    ended_ = true;
    WakeReader();
  }
  if (observer_.on_done) observer_.on_done(absl::CancelledError("the call was stopped: the host kills the process"));
}

asio::awaitable<InteractiveProcess::Output> FakeInteractive::ReadUntil(const std::string& marker, absl::Time deadline) {
  auto wake = std::make_shared<Wake>(co_await asio::this_coro::executor, 1);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      Output out;
      const size_t at = output_.find(marker);
      if (at != std::string::npos) {
        out.text = output_.substr(0, at);
        out.marked = true;
        output_.erase(0, at + marker.size());
        wake_ = nullptr;
        co_return out;
      }
      if (ended_ || clock_->Now() >= deadline) {
        out.text = std::move(output_);
        output_.clear();
        out.ended = ended_;
        wake_ = nullptr;
        co_return out;
      }
      wake_ = wake;
    }
    using namespace asio::experimental::awaitable_operators;  // NOLINT: || on awaitables
    (void)co_await (wake->async_receive(asio::as_tuple(asio::use_awaitable)) || async::SleepUntil(*clock_, deadline));
  }
}

}  // namespace corral::sandbox
