#include "services/sandbox_host/exec/execution.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/sandbox_host/linux/process_sweep.h"

namespace corral::sandbox {
namespace {

constexpr size_t kChunk = 64 * 1024;
constexpr int kPidfdIdType = 3;  // P_PIDFD (Linux 5.4), not in every libc's headers

}  // namespace

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

Execution::Execution(FdWatcher* watcher, uint64_t key, pid_t pid, std::shared_ptr<const Sandbox> sandbox,
                     ExecOptions options, absl::Time start)
    : watcher_(watcher),
      key_(key),
      id_(ProcessIdOf(key)),
      pid_(pid),
      sandbox_(std::move(sandbox)),
      start_(start),
      options_(std::move(options)) {}

// ------------------------------------------------------------------------------------------- for consumers

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

bool Execution::finished() const {
  absl::MutexLock lock(&mu_);
  return exit_.has_value() && out_.eof && err_.eof;
}

std::optional<OutputEvent> Execution::Next() {
  absl::MutexLock lock(&mu_);
  if (!buffer_.empty()) {
    OutputEvent e = std::move(buffer_.front());
    buffer_.pop_front();
    buffered_ -= e.data.size();
    // Room again: resume reading what the process writes.
    for (Stream stream : {Stream::kStdout, Stream::kStderr}) {
      Pipe& pipe = PipeOf(stream);
      if (pipe.paused && !pipe.eof && buffered_ < options_.buffer_limit) {
        pipe.paused = false;
        watcher_->Watch(key_, stream, pipe.fd.get());
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
    sweeping_ = true;  // the exit is reported only once nothing of the process's tree runs any more
  }
  {
    absl::MutexLock uid_lock(&sandbox_->uid_mu);
    // Once the sandbox is torn down everything of it is dead already, and its uid may be another sandbox's.
    if (!sandbox_->deleted) {
      kill(-pid_, SIGKILL);  // the whole process group, then what left it (setsid, double forks); never the
                             // sandbox's other processes, which a background server or another command may be
      KillProcessTree(sandbox_->uid, pid_, absl::StrCat(kProcessIdVar, "=", id_));
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
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](const std::optional<ExitInfo>* x) { return x->has_value(); }, &exit_),
                              timeout);
}

ProcessInfo Execution::Info() const {
  ProcessInfo info{.id = id_,
                   .pid = pid_,
                   .kind = options_.kind,
                   .argv = options_.argv,
                   .start_time = start_,
                   .output_path = options_.output_path,
                   .copy_of = options_.copy_of};
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
        watcher_->Watch(key_, Stream::kStdin, stdin_.get(), EPOLLOUT);  // the loop's thread writes
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
  if (stdin_watched_) watcher_->Unwatch(stdin_.get());
  stdin_watched_ = false;
  stdin_.Reset();
}

// ------------------------------------------------------------------------------------------ for the loop

absl::Status Execution::Attach(Spawned spawned) {
  pidfd_.Reset(static_cast<int>(syscall(SYS_pidfd_open, pid_, 0)));
  int err = pidfd_.valid() ? 0 : errno;
  bool watched = pidfd_.valid();
  {
    absl::MutexLock lock(&mu_);
    out_.fd = std::move(spawned.stdout_fd);
    err_.fd = std::move(spawned.stderr_fd);
    if (spawned.exec_errno != 0) {
      buffer_.push_back(
          {OutputEvent::kStderr, absl::StrCat(options_.argv[0], ": ", strerror(spawned.exec_errno), "\n")});
      buffered_ += buffer_.back().data.size();
    }
    watched = watched && watcher_->Watch(key_, Stream::kStdout, out_.fd.get()) &&
              watcher_->Watch(key_, Stream::kStderr, err_.fd.get());
    // Stdin is written by the loop's thread from a non-blocking pipe, so no caller ever blocks on it.
    fcntl(spawned.stdin_fd.get(), F_SETFL, O_NONBLOCK);
    stdin_ = std::move(spawned.stdin_fd);
  }
  watched = watched && watcher_->Watch(key_, Stream::kExit, pidfd_.get());
  if (!watched) {
    if (err == 0) err = errno;
    {
      absl::MutexLock lock(&mu_);
      watcher_->Unwatch(out_.fd.get());
      watcher_->Unwatch(err_.fd.get());
    }
    watcher_->Unwatch(pidfd_.get());
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    return absl::InternalError(absl::StrCat("cannot watch the new process: ", strerror(err)));
  }
  if (!options_.stdin_data.empty()) SendStdin(std::exchange(options_.stdin_data, {}), nullptr);
  if (options_.kind != ProcessKind::kInteractive) CloseStdin();
  return absl::OkStatus();
}

void Execution::OnReadable(Stream stream) {
  bool notify = false;
  {
    absl::MutexLock lock(&mu_);
    Pipe& pipe = PipeOf(stream);
    if (pipe.eof || pipe.paused) return;
    char buf[kChunk];
    ssize_t r = read(pipe.fd.get(), buf, sizeof(buf));
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
      watcher_->Unwatch(pipe.fd.get());
      pipe.fd.Reset();
      pipe.eof = true;
      notify = true;
    } else {
      const uint64_t n = static_cast<uint64_t>(r);
      (stream == Stream::kStdout ? stdout_bytes_ : stderr_bytes_) += n;
      uint64_t keep = n;
      if (options_.max_output_bytes > 0) {
        const uint64_t room = options_.max_output_bytes > kept_bytes_ ? options_.max_output_bytes - kept_bytes_ : 0;
        keep = std::min(n, room);
        dropped_bytes_ += n - keep;
      }
      kept_bytes_ += keep;
      if (keep > 0) {
        buffer_.push_back({stream == Stream::kStdout ? OutputEvent::kStdout : OutputEvent::kStderr,
                           std::string(buf, static_cast<size_t>(keep))});
        buffered_ += keep;
        notify = true;
      }
      if (buffered_ >= options_.buffer_limit) {
        // The consumer is behind: stop reading; the process blocks on its full pipe until Next() drains.
        pipe.paused = true;
        watcher_->Unwatch(pipe.fd.get());
      }
    }
  }
  if (notify) Notify();
}

void Execution::OnWritable() {
  std::function<void()> written;
  {
    absl::MutexLock lock(&mu_);
    if (!stdin_.valid() || stdin_pending_.empty()) return;
    written = WriteStdin();
  }
  if (written) written();
}

ExitInfo Execution::OnExited(absl::Time now) {
  watcher_->Unwatch(pidfd_.get());
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0) {
    info.si_code = CLD_KILLED;
    info.si_status = SIGKILL;
  }
  pidfd_.Reset();
  ExitInfo x;
  if (info.si_code == CLD_EXITED) {
    x.exit_code = info.si_status;
    x.reason = ExitReason::kExited;
  } else {
    x.signal = info.si_status;
    x.exit_code = 128 + info.si_status;
    x.reason = ExitReason::kSignaled;
  }
  std::function<void()> stdin_written;
  {
    absl::MutexLock lock(&mu_);
    if (kill_reason_) {
      x.reason = *kill_reason_;
    } else if (signaled_by_api_ && x.signal != 0) {
      x.reason = ExitReason::kKilled;
    } else if (sandbox_->deleted) {
      x.reason = ExitReason::kSandboxDeleted;
    }
    x.timed_out = x.reason == ExitReason::kTimedOut;
    x.duration = now - start_;
    x.end_time = now;
    x.stdout_bytes = stdout_bytes_;
    x.stderr_bytes = stderr_bytes_;
    x.dropped_bytes = dropped_bytes_;
    exit_ = x;
    stdin_written = DropStdin();
  }
  if (stdin_written) stdin_written();
  return x;
}

void Execution::CloseOutputs() {
  {
    absl::MutexLock lock(&mu_);
    CloseOutputsLocked();
  }
  Notify();
}

void Execution::CloseOutputsLocked() {
  for (Pipe* pipe : {&out_, &err_}) {
    if (!pipe->eof) {
      watcher_->Unwatch(pipe->fd.get());
      pipe->fd.Reset();
      pipe->eof = true;
    }
  }
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
  watcher_->Unwatch(stdin_.get());
  stdin_watched_ = false;
  if (stdin_close_after_) stdin_.Reset();
  return std::exchange(stdin_written_, nullptr);
}

std::function<void()> Execution::DropStdin() {
  if (stdin_watched_) watcher_->Unwatch(stdin_.get());
  stdin_watched_ = false;
  stdin_.Reset();
  stdin_pending_.clear();
  stdin_offset_ = 0;
  return std::exchange(stdin_written_, nullptr);
}

}  // namespace corral::sandbox
