#include "services/sandbox_host/exec_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

constexpr int kStdout = 0, kStderr = 1, kExitFd = 2, kStdin = 3;
constexpr size_t kChunk = 64 * 1024;
constexpr absl::Duration kDrainAfterExit = absl::Milliseconds(200);  // background children may hold the pipes

constexpr int kPidfdIdType = 3;  // P_PIDFD (Linux 5.4), not in every libc's headers

uint64_t Tag(uint64_t key, int which) { return key << 2 | static_cast<uint64_t>(which); }

const char* ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kExited: return "exited";
    case ExitReason::kSignaled: return "signaled";
    case ExitReason::kTimedOut: return "timed_out";
    case ExitReason::kKilled: return "killed";
    case ExitReason::kSandboxDeleted: return "sandbox_deleted";
    case ExitReason::kCallEnded: return "call_ended";
  }
  return "unknown";
}

}  // namespace

// ---------------------------------------------------------------------------------------------- Execution

void Execution::SetListener(std::function<void()> listener) {
  {
    absl::MutexLock lock(&mu_);
    listener_ = std::move(listener);
  }
  Notify();  // something may already be waiting
}

void Execution::Notify() {
  std::function<void()> listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
  }
  if (listener) listener();
}

bool Execution::exited() const {
  absl::MutexLock lock(&mu_);
  return exit_.has_value();
}

std::optional<OutputEvent> Execution::Next() {
  absl::MutexLock lock(&mu_);
  if (!buffer_.empty()) {
    OutputEvent e = std::move(buffer_.front());
    buffer_.pop_front();
    buffered_ -= e.data.size();
    // Room again: resume reading what the process writes.
    for (auto [pipe, which] : {std::pair{&out_, kStdout}, std::pair{&err_, kStderr}}) {
      if (pipe->paused && !pipe->eof && buffered_ < options_.buffer_limit) {
        pipe->paused = false;
        manager_->Watch(key_, which, pipe->fd.get());
      }
    }
    return e;
  }
  if (exit_ && out_.eof && err_.eof && !sweeping_ && !exit_delivered_) {
    exit_delivered_ = true;
    ExitInfo final_info = *exit_;  // output read after the exit counts too
    final_info.stdout_bytes = stdout_bytes_;
    final_info.stderr_bytes = stderr_bytes_;
    final_info.dropped_bytes = dropped_bytes_;
    return OutputEvent{OutputEvent::kExit, "", final_info};
  }
  return std::nullopt;
}

void Execution::Kill(ExitReason reason) {
  {
    absl::MutexLock lock(&mu_);
    if (exit_ || sweeping_) return;
    if (!kill_reason_) kill_reason_ = reason;
    sweeping_ = true;  // the exit is reported only once nothing of the uid runs any more
  }
  {
    absl::MutexLock uid_lock(&sandbox_->uid_mu);
    // Once the sandbox is torn down everything of it is dead already, and its uid may be another sandbox's.
    if (!sandbox_->deleted) {
      kill(-pid_, SIGKILL);      // the whole process group…
      KillAllOf(sandbox_->uid);  // …then everything else running as the sandbox's uid (setsid escapees)
    }
  }
  {
    absl::MutexLock lock(&mu_);
    sweeping_ = false;
  }
  Notify();
}

void Execution::Signal(int sig) {
  if (sig == SIGKILL) return Kill(ExitReason::kKilled);
  {
    absl::MutexLock lock(&mu_);
    if (exit_) return;
    signaled_by_api_ = true;
  }
  kill(-pid_, sig);
}

bool Execution::WaitExited(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(+[](const std::optional<ExitInfo>* x) { return x->has_value(); }, &exit_), timeout);
}

ProcessInfo Execution::Info() const {
  ProcessInfo info{.id = id_, .pid = pid_, .kind = options_.kind, .argv = options_.argv, .start_time = start_,
                   .output_path = options_.output_path};
  absl::MutexLock lock(&mu_);
  info.exit = exit_;
  return info;
}

void Execution::SendStdin(std::string data, std::function<void()> written) {
  if (!data.empty()) {
    absl::MutexLock lock(&mu_);
    if (stdin_.valid() && !exit_ && stdin_pending_.empty()) {
      stdin_pending_ = std::move(data);
      stdin_offset_ = 0;
      stdin_written_ = std::move(written);
      if (!stdin_watched_) {
        stdin_watched_ = true;
        manager_->Watch(key_, kStdin, stdin_.get(), EPOLLOUT);  // the manager's thread writes
      }
      return;
    }
  }
  if (written) written();  // stdin is closed (or the process is gone): the data is dropped
}

void Execution::CloseStdin() {
  absl::MutexLock lock(&mu_);
  if (!stdin_pending_.empty()) {
    stdin_close_after_ = true;
    return;
  }
  if (stdin_watched_) manager_->Unwatch(stdin_.get());
  stdin_watched_ = false;
  stdin_.Reset();
}

std::function<void()> Execution::WriteStdin() {
  while (stdin_offset_ < stdin_pending_.size()) {
    ssize_t n = write(stdin_.get(), stdin_pending_.data() + stdin_offset_, stdin_pending_.size() - stdin_offset_);
    if (n > 0) {
      stdin_offset_ += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return nullptr;  // the pipe is full: wait for EPOLLOUT
    } else {
      return DropStdin();  // EPIPE: the process closed its stdin
    }
  }
  stdin_pending_.clear();
  stdin_offset_ = 0;
  manager_->Unwatch(stdin_.get());
  stdin_watched_ = false;
  if (stdin_close_after_) stdin_.Reset();
  return std::exchange(stdin_written_, nullptr);
}

std::function<void()> Execution::DropStdin() {
  if (stdin_watched_) manager_->Unwatch(stdin_.get());
  stdin_watched_ = false;
  stdin_.Reset();
  stdin_pending_.clear();
  stdin_offset_ = 0;
  return std::exchange(stdin_written_, nullptr);
}

void Execution::CloseOutputs() {
  for (Pipe* pipe : {&out_, &err_}) {
    if (!pipe->eof) {
      manager_->Unwatch(pipe->fd.get());
      pipe->fd.Reset();
      pipe->eof = true;
    }
  }
}

// ---------------------------------------------------------------------------------------------- ExecManager

ExecManager::ExecManager(Clock* clock, SandboxHostMetrics* metrics) : clock_(clock), metrics_(metrics) {
  epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
  wake_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{EPOLLIN, {.u64 = 0}};
  if (!epoll_.valid() || !wake_.valid() || epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    // Nothing could be watched: every Start fails (Watch reports it), rather than processes going unnoticed.
    spdlog::error("exec manager: cannot set up epoll: {}", strerror(errno));
  }
  thread_ = std::thread([this] { Loop(); });
}

ExecManager::~ExecManager() {
  std::vector<std::shared_ptr<Execution>> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, e] : executions_) all.push_back(e);
  }
  for (auto& e : all) {
    clock_->Cancel(e->timeout_timer_);
    e->Kill(ExitReason::kKilled);
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_.get(), &one, sizeof(one));
  (void)ignored;
  thread_.join();
}

size_t ExecManager::running() const {
  absl::MutexLock lock(&mu_);
  return executions_.size();
}

bool ExecManager::Watch(uint64_t key, int which, int fd, uint32_t events) {
  epoll_event ev{events, {.u64 = Tag(key, which)}};
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) == 0) return true;
  spdlog::error("exec manager: cannot watch descriptor {} of process p-{}: {}", fd, key, strerror(errno));
  return false;
}

void ExecManager::Unwatch(int fd) {
  if (fd >= 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

absl::StatusOr<std::shared_ptr<Execution>> ExecManager::Start(std::shared_ptr<const Sandbox> sandbox, ExecOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) return absl::InvalidArgumentError("argv must not be empty");
  for (const auto& [k, v] : options.env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("env name '", k, "' is invalid"));
    }
    if (k == "HOME" || k == "USER" || k == "CORRAL_SANDBOX_ID") {
      return absl::InvalidArgumentError(absl::StrCat("env ", k, " is set by the host"));
    }
  }
  SpawnSpec spec = sandbox->SpawnFor(options.argv, options.env, options.cwd);
  spec.pipe_stdin = true;
  auto spawned = Spawn(spec);
  if (!spawned.ok()) return spawned.status();

  sandbox->running++;  // a running process keeps the sandbox from idle eviction
  auto e = std::shared_ptr<Execution>(new Execution());
  e->manager_ = this;
  e->pid_ = spawned->pid;
  e->sandbox_ = std::move(sandbox);
  e->start_ = clock_->Now();
  e->options_ = std::move(options);
  e->pidfd_.Reset(static_cast<int>(syscall(SYS_pidfd_open, spawned->pid, 0)));
  {
    absl::MutexLock lock(&e->mu_);
    e->out_.fd = std::move(spawned->stdout_fd);
    e->err_.fd = std::move(spawned->stderr_fd);
    if (spawned->exec_errno != 0) {
      e->buffer_.push_back({OutputEvent::kStderr, absl::StrCat(e->options_.argv[0], ": ", strerror(spawned->exec_errno), "\n")});
      e->buffered_ += e->buffer_.back().data.size();
    }
  }
  {
    absl::MutexLock lock(&mu_);
    e->key_ = next_key_++;
    e->id_ = absl::StrCat("p-", e->key_);
    executions_.emplace(e->key_, e);
  }
  bool watched = e->pidfd_.valid();
  {
    absl::MutexLock lock(&e->mu_);
    watched = watched && Watch(e->key_, kStdout, e->out_.fd.get()) && Watch(e->key_, kStderr, e->err_.fd.get());
    // Stdin is written by this manager's thread from a non-blocking pipe, so no caller ever blocks on it.
    fcntl(spawned->stdin_fd.get(), F_SETFL, O_NONBLOCK);
    e->stdin_ = std::move(spawned->stdin_fd);
  }
  watched = watched && Watch(e->key_, kExitFd, e->pidfd_.get());
  if (!watched) {
    // A process whose exit or output would go unnoticed must not run: killed and reaped, and the call fails.
    const int err = errno;
    Unwatch(e->out_.fd.get());
    Unwatch(e->err_.fd.get());
    Unwatch(e->pidfd_.get());
    kill(-spawned->pid, SIGKILL);
    waitpid(spawned->pid, nullptr, 0);
    e->sandbox_->running--;
    {
      absl::MutexLock lock(&mu_);
      executions_.erase(e->key_);
    }
    return absl::InternalError(absl::StrCat("cannot watch the new process: ", strerror(err)));
  }
  if (!e->options_.stdin_data.empty()) e->SendStdin(std::move(e->options_.stdin_data), nullptr);
  if (e->options_.kind != ProcessKind::kInteractive) e->CloseStdin();
  if (e->options_.timeout > absl::ZeroDuration()) {
    std::weak_ptr<Execution> weak = e;
    // The kill sweep can take seconds: on a worker, not on the clock's thread that runs every other timer.
    e->timeout_timer_ = clock_->RunAfter(e->options_.timeout, [weak, workers = workers_] {
      RunOn(workers, [weak] {
        if (auto strong = weak.lock()) strong->Kill(ExitReason::kTimedOut);
      });
    });
  }
  return e;
}

void ExecManager::Loop() {
  // Stdin writes to a process that closed its end must fail with EPIPE here, not kill the host.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  epoll_event events[64];
  absl::Time next_sweep = absl::Now();
  while (true) {
    int n = epoll_wait(epoll_.get(), events, 64, 1000);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == 0) return;  // woken to stop
      const uint64_t key = tag >> 2;
      const int which = static_cast<int>(tag & 3);
      if (which == kExitFd) {
        OnProcessExit(key);
      } else if (which == kStdin) {
        OnWritable(key);
      } else {
        OnReadable(key, which);
      }
    }
    if (absl::Now() >= next_sweep) {
      ReapOrphans();
      {
        absl::MutexLock lock(&mu_);
        PruneHistory();
      }
      next_sweep = absl::Now() + absl::Seconds(1);
    }
  }
}

std::shared_ptr<Execution> ExecManager::Find(uint64_t key) {
  absl::MutexLock lock(&mu_);
  auto it = executions_.find(key);
  return it == executions_.end() ? nullptr : it->second;
}

void ExecManager::OnReadable(uint64_t key, int which) {
  std::shared_ptr<Execution> e = Find(key);
  if (e == nullptr) return;
  bool notify = false;
  {
    absl::MutexLock lock(&e->mu_);
    Execution::Pipe& pipe = which == kStdout ? e->out_ : e->err_;
    if (pipe.eof || pipe.paused) return;
    char buf[kChunk];
    ssize_t r = read(pipe.fd.get(), buf, sizeof(buf));
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
      Unwatch(pipe.fd.get());
      pipe.fd.Reset();
      pipe.eof = true;
      notify = true;
    } else {
      const uint64_t n = static_cast<uint64_t>(r);
      (which == kStdout ? e->stdout_bytes_ : e->stderr_bytes_) += n;
      uint64_t keep = n;
      if (e->options_.max_output_bytes > 0) {
        const uint64_t room = e->options_.max_output_bytes > e->kept_bytes_ ? e->options_.max_output_bytes - e->kept_bytes_ : 0;
        keep = std::min(n, room);
        e->dropped_bytes_ += n - keep;
      }
      e->kept_bytes_ += keep;
      if (keep > 0) {
        e->buffer_.push_back({which == kStdout ? OutputEvent::kStdout : OutputEvent::kStderr,
                              std::string(buf, static_cast<size_t>(keep))});
        e->buffered_ += keep;
        notify = true;
      }
      if (e->buffered_ >= e->options_.buffer_limit) {
        // The consumer is behind: stop reading; the process blocks on its full pipe until Next() drains.
        pipe.paused = true;
        Unwatch(pipe.fd.get());
      }
    }
  }
  if (notify) e->Notify();
}

void ExecManager::OnProcessExit(uint64_t key) {
  std::shared_ptr<Execution> e = Find(key);
  if (e == nullptr) return;
  Unwatch(e->pidfd_.get());
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(e->pidfd_.get()), &info, WEXITED) != 0) {
    info.si_code = CLD_KILLED;
    info.si_status = SIGKILL;
  }
  e->pidfd_.Reset();
  clock_->Cancel(e->timeout_timer_);
  std::function<void()> stdin_written;
  {
    absl::MutexLock lock(&e->mu_);
    ExitInfo x;
    if (info.si_code == CLD_EXITED) {
      x.exit_code = info.si_status;
      x.reason = ExitReason::kExited;
    } else {
      x.signal = info.si_status;
      x.exit_code = 128 + info.si_status;
      x.reason = ExitReason::kSignaled;
    }
    if (e->kill_reason_) {
      x.reason = *e->kill_reason_;
    } else if (e->signaled_by_api_ && x.signal != 0) {
      x.reason = ExitReason::kKilled;
    } else if (e->sandbox_->deleted) {
      x.reason = ExitReason::kSandboxDeleted;
    }
    x.timed_out = x.reason == ExitReason::kTimedOut;
    x.duration = clock_->Now() - e->start_;
    x.stdout_bytes = e->stdout_bytes_;
    x.stderr_bytes = e->stderr_bytes_;
    x.dropped_bytes = e->dropped_bytes_;
    e->exit_ = x;
    stdin_written = e->DropStdin();
    e->sandbox_->Touch(clock_->Now());
    e->sandbox_->running--;
    if (metrics_) metrics_->Exec(ExitReasonName(x.reason)).Observe(absl::ToDoubleSeconds(x.duration));
  }
  if (stdin_written) stdin_written();
  {
    absl::MutexLock lock(&mu_);
    History& h = history_[e->sandbox_->id];
    h.sandbox = e->sandbox_;
    h.exited.push_back(e->Info());
    if (h.exited.size() > kMaxExitedKept) h.exited.pop_front();
  }
  e->Notify();
  // Output still in the pipes comes through; a background child holding them open gets a short grace.
  std::weak_ptr<Execution> weak = e;
  clock_->RunAfter(kDrainAfterExit, [this, weak, key] {
    if (auto strong = weak.lock()) {
      {
        absl::MutexLock lock(&strong->mu_);
        strong->CloseOutputs();
      }
      strong->Notify();
    }
    absl::MutexLock lock(&mu_);
    executions_.erase(key);
  });
}

void ExecManager::OnWritable(uint64_t key) {
  std::shared_ptr<Execution> e = Find(key);
  if (e == nullptr) return;
  std::function<void()> written;
  {
    absl::MutexLock lock(&e->mu_);
    if (!e->stdin_.valid() || e->stdin_pending_.empty()) return;
    written = e->WriteStdin();
  }
  if (written) written();
}

std::vector<ProcessInfo> ExecManager::List(const std::string& sandbox_id, bool include_exited) const {
  std::vector<ProcessInfo> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, e] : executions_) {
    if (e->sandbox_->id != sandbox_id) continue;
    ProcessInfo info = e->Info();
    if (!info.exit) out.push_back(std::move(info));  // exited ones come from the history
  }
  if (auto it = history_.find(sandbox_id); include_exited && it != history_.end()) {
    out.insert(out.end(), it->second.exited.begin(), it->second.exited.end());
  }
  std::sort(out.begin(), out.end(), [](const ProcessInfo& a, const ProcessInfo& b) {
    return std::pair(a.start_time, a.pid) < std::pair(b.start_time, b.pid);
  });
  return out;
}

absl::StatusOr<ProcessInfo> ExecManager::Signal(const std::string& sandbox_id, const std::string& process_id,
                                                int sig) {
  std::shared_ptr<Execution> target;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, e] : executions_) {
      if (e->sandbox_->id == sandbox_id && e->id_ == process_id) target = e;
    }
    if (target == nullptr) {
      if (auto it = history_.find(sandbox_id); it != history_.end()) {
        for (const ProcessInfo& p : it->second.exited) {
          if (p.id == process_id) return p;  // already exited: unchanged
        }
      }
      return absl::NotFoundError(absl::StrCat("process '", process_id, "' not found in sandbox '", sandbox_id, "'"));
    }
  }
  target->Signal(sig);
  if (sig == SIGKILL) target->WaitExited(absl::Seconds(2));  // the sweep is done; the exit follows at once
  return target->Info();
}

void ExecManager::PruneHistory() {
  absl::erase_if(history_, [](const auto& entry) {
    auto sandbox = entry.second.sandbox.lock();
    return sandbox == nullptr || sandbox->deleted;
  });
}

void ExecManager::ReapOrphans() {
  // As a subreaper the host inherits processes whose parents exited; reap the zombies nobody else waits for.
  // Zombies younger than a few seconds are left alone: one may be a child Start has not registered yet.
  absl::flat_hash_set<pid_t> tracked;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, e] : executions_) tracked.insert(e->pid_);
  }
  const pid_t self = getpid();
  double uptime = 0;
  {
    std::ifstream up("/proc/uptime");
    up >> uptime;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (dirent* d = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(d->d_name, &pid) || tracked.contains(pid)) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    size_t close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    char state = line[close + 2];
    pid_t ppid = 0;
    size_t space = line.find(' ', close + 4);
    if (state != 'Z' || !absl::SimpleAtoi(line.substr(close + 4, space - close - 4), &ppid) || ppid != self) continue;
    // Field 22 (starttime) counts from field 3 (state), the first after the command name.
    std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
    double started = 0;
    if (fields.size() > 19 && absl::SimpleAtod(fields[19], &started) && uptime - started / ticks < 3) continue;
    waitpid(pid, nullptr, WNOHANG);
  }
  closedir(proc);
}

}  // namespace corral::sandbox
