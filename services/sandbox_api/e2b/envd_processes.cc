#include "services/sandbox_api/e2b/envd_processes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/async/sleep.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;

constexpr size_t kMaxKeptBytes = 8 << 20;

// Go's names for a signal, as envd's "status" and "error" carry them ("signal: killed").
std::string SignalName(int signal) {
  switch (signal) {
    case 1: return "hangup";
    case 2: return "interrupt";
    case 3: return "quit";
    case 6: return "aborted";
    case 9: return "killed";
    case 11: return "segmentation fault";
    case 13: return "broken pipe";
    case 15: return "terminated";
    default: return absl::StrCat("signal ", signal);
  }
}

// envd's EndEvent: exited with its code, or ended by a signal (exitCode -1, exited false).
envd::ProcessEvent EndEvent(const v1::ExitStatus& exit) {
  envd::ProcessEvent event;
  envd::ProcessEvent::EndEvent* end = event.mutable_end();
  const bool by_signal = exit.signal() != 0 || exit.reason() == v1::EXIT_REASON_KILLED ||
                         exit.reason() == v1::EXIT_REASON_TIMED_OUT || exit.reason() == v1::EXIT_REASON_OOM_KILLED;
  if (by_signal) {
    end->set_exit_code(-1);
    end->set_exited(false);
    end->set_status(absl::StrCat("signal: ", SignalName(exit.signal() != 0 ? exit.signal() : 9)));
    end->set_error(end->status());
  } else {
    end->set_exit_code(exit.exit_code());
    end->set_exited(true);
    end->set_status(absl::StrCat("exit status ", exit.exit_code()));
    if (exit.exit_code() != 0) end->set_error(end->status());
  }
  return event;
}

}  // namespace

void EnvdProcess::Append(envd::ProcessEvent event) {
  bytes_ += event.ByteSizeLong();
  events_.push_back(std::move(event));
  while (bytes_ > kMaxKeptBytes && events_.size() > 1) {
    bytes_ -= events_.front().ByteSizeLong();
    events_.pop_front();
    ++first_;
  }
  for (const auto& wake : waiting_) wake->try_send(boost::system::error_code());
  waiting_.clear();
}

sandbox::ExecObserver EnvdProcess::Observe(std::weak_ptr<EnvdProcess> process,
                                           std::function<void(EnvdProcess& process)> ended) {
  return sandbox::ExecObserver{
      .on_event =
          [process, ended](const v1::ExecEvent& event) {
            auto p = process.lock();
            if (p == nullptr) return;
            p->OnEvent(event);
            if (event.has_exited() && ended) ended(*p);
          },
      .on_done =
          [process, ended](const absl::Status& status) {
            auto p = process.lock();
            if (p == nullptr) return;
            p->OnDone(status);
            if (ended) ended(*p);
          },
  };
}

void EnvdProcess::OnEvent(const v1::ExecEvent& event) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  envd::ProcessEvent out;
  switch (event.event_case()) {
    case v1::ExecEvent::kStarted: pid_ = static_cast<uint32_t>(event.started().pid()); return;
    case v1::ExecEvent::kStdout: out.mutable_data()->set_stdout(event.stdout()); break;
    case v1::ExecEvent::kStderr: out.mutable_data()->set_stderr(event.stderr()); break;
    case v1::ExecEvent::kKeepalive: out.mutable_keepalive(); break;
    case v1::ExecEvent::kExited:
      ended_ = true;
      out = EndEvent(event.exited());
      break;
    default: return;
  }
  Append(std::move(out));
}

void EnvdProcess::OnDone(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  envd::ProcessEvent out;
  envd::ProcessEvent::EndEvent* end = out.mutable_end();
  end->set_exit_code(-1);
  end->set_status("unknown");
  end->set_error(absl::StrCat("the process's stream ended: ", status.ToString()));
  Append(std::move(out));
}

asio::awaitable<EnvdProcess::Batch> EnvdProcess::Read(size_t* next, absl::Time until) {
  auto executor = co_await asio::this_coro::executor;
  std::shared_ptr<Wake> wake;
  for (int round = 0; round < 2; ++round) {
    {
      absl::MutexLock lock(&mu_);
      Batch batch;
      *next = std::max(*next, first_);
      for (size_t i = *next - first_; i < events_.size(); ++i) batch.events.push_back(events_[i]);
      *next = first_ + events_.size();
      batch.ended = ended_;
      if (!batch.events.empty() || ended_ || round == 1 || clock_->Now() >= until) co_return batch;
      wake = std::make_shared<Wake>(executor, 1);
      waiting_.push_back(wake);
    }
    using namespace asio::experimental::awaitable_operators;  // NOLINT: || on awaitables
    (void)co_await (wake->async_receive(asio::as_tuple(asio::use_awaitable)) || async::SleepUntil(*clock_, until));
    absl::MutexLock lock(&mu_);
    std::erase(waiting_, wake);
  }
  co_return Batch{};
}

size_t EnvdProcess::end_index() const {
  absl::MutexLock lock(&mu_);
  return first_ + events_.size();
}

void EnvdProcess::Release(size_t upto) {
  absl::MutexLock lock(&mu_);
  while (first_ < upto && !events_.empty()) {
    bytes_ -= events_.front().ByteSizeLong();
    events_.pop_front();
    ++first_;
  }
}

uint32_t EnvdProcess::pid() const {
  absl::MutexLock lock(&mu_);
  return pid_;
}

bool EnvdProcess::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void EnvdProcesses::Add(const std::string& sandbox_id, std::shared_ptr<EnvdProcess> process) {
  absl::MutexLock lock(&mu_);
  const uint32_t pid = process->pid();
  if (by_sandbox_[sandbox_id].insert_or_assign(pid, std::move(process)).second) ++size_;
  if (count_ != nullptr) count_->Set(static_cast<double>(size_));
}

void EnvdProcesses::Remove(const std::string& sandbox_id, uint32_t pid) {
  absl::MutexLock lock(&mu_);
  auto it = by_sandbox_.find(sandbox_id);
  if (it == by_sandbox_.end()) return;
  size_ -= it->second.erase(pid);
  if (it->second.empty()) by_sandbox_.erase(it);
  if (count_ != nullptr) count_->Set(static_cast<double>(size_));
}

std::shared_ptr<EnvdProcess> EnvdProcesses::Find(const std::string& sandbox_id, uint32_t pid) const {
  absl::MutexLock lock(&mu_);
  auto it = by_sandbox_.find(sandbox_id);
  if (it == by_sandbox_.end()) return nullptr;
  auto p = it->second.find(pid);
  return p == it->second.end() ? nullptr : p->second;
}

std::shared_ptr<EnvdProcess> EnvdProcesses::FindTag(const std::string& sandbox_id, const std::string& tag) const {
  for (auto& p : List(sandbox_id)) {
    if (!tag.empty() && p->tag() == tag) return p;
  }
  return nullptr;
}

std::vector<std::shared_ptr<EnvdProcess>> EnvdProcesses::List(const std::string& sandbox_id) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<EnvdProcess>> out;
  auto it = by_sandbox_.find(sandbox_id);
  if (it == by_sandbox_.end()) return out;
  for (const auto& [pid, p] : it->second) out.push_back(p);
  return out;
}

std::vector<std::shared_ptr<EnvdProcess>> EnvdProcesses::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<EnvdProcess>> out;
  for (const auto& [id, m] : by_sandbox_) {
    for (const auto& [pid, p] : m) out.push_back(p);
  }
  return out;
}

size_t EnvdProcesses::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

}  // namespace corral::sandbox_api
