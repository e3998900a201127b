#include "services/sandbox_host/linux/tracee.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

#if defined(__x86_64__)

struct Tracee::Registers {
  user_regs_struct regs{};
};

namespace {

// The kernel's codes for a call interrupted before it finished, which it makes again when no handler runs.
constexpr long kRestartSys = 512, kRestartNoIntr = 513, kRestartNoHand = 514, kRestartBlock = 516;
constexpr size_t kRedZone = 128;  // the x86_64 ABI's: leaf functions use it below the stack pointer

absl::Status Errno(absl::string_view what, pid_t pid) {
  return absl::InternalError(absl::StrCat(what, " (process ", pid, "): ", strerror(errno)));
}

absl::Status Gone(pid_t pid, int status) {
  return absl::AbortedError(WIFSIGNALED(status)
                                ? absl::StrCat("process ", pid, " was killed (signal ", WTERMSIG(status), ")")
                                : absl::StrCat("process ", pid, " exited"));
}

// The address of a syscall instruction (0f 05) in its vDSO, which every process has.
absl::StatusOr<uint64_t> SyscallInVdso(pid_t pid) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("[vdso]") == std::string::npos) continue;
    const uint64_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    UniqueFd mem(open(absl::StrCat("/proc/", pid, "/mem").c_str(), O_RDONLY | O_CLOEXEC));
    std::string code(end - start, '\0');
    if (!mem.valid() || pread(mem.get(), code.data(), code.size(), static_cast<off_t>(start)) <= 0) break;
    const size_t at = code.find("\x0f\x05");
    if (at != std::string::npos) return start + at;
  }
  return absl::FailedPreconditionError(absl::StrCat("process ", pid, ": no syscall instruction found in its vDSO"));
}

bool IsSyscallAt(pid_t pid, uint64_t address) {
  errno = 0;
  const long word = ptrace(PTRACE_PEEKTEXT, pid, address, nullptr);
  return errno == 0 && (word & 0xffff) == 0x050f;
}

}  // namespace

Tracee::Tracee(pid_t pid, std::unique_ptr<Registers> saved, uint64_t syscall_at)
    : pid_(pid), saved_(std::move(saved)), syscall_at_(syscall_at) {
  scratch_ = (saved_->regs.rsp - kRedZone - 256) & ~uint64_t{15};
}

Tracee::~Tracee() {
  if (attached_) (void)Release();
}

absl::StatusOr<std::unique_ptr<Tracee>> Tracee::Seize(pid_t pid) {
  if (ptrace(PTRACE_SEIZE, pid, nullptr, PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEFORK | PTRACE_O_EXITKILL) != 0) {
    return Errno("attaching to it", pid);
  }
  std::vector<int> signals;
  auto detach = [&](absl::Status why) {
    (void)ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
    for (int sig : signals) kill(pid, sig);
    return why;
  };
  if (ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr) != 0) return detach(Errno("stopping it", pid));
  int status = 0;
  if (waitpid(pid, &status, __WALL) != pid) return detach(Errno("waiting for it to stop", pid));
  if (!WIFSTOPPED(status)) return Gone(pid, status);
  if ((status >> 16) == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80)) signals.push_back(WSTOPSIG(status));
  auto saved = std::make_unique<Registers>();
  if (ptrace(PTRACE_GETREGS, pid, nullptr, &saved->regs) != 0) return detach(Errno("reading its registers", pid));
  user_regs_struct& r = saved->regs;
  // Stopped in a call it had not finished: it makes it again when it goes on, as the kernel would have.
  if (static_cast<long>(r.orig_rax) >= 0) {
    const long result = -static_cast<long>(r.rax);
    if (result == kRestartSys || result == kRestartNoIntr || result == kRestartNoHand) {
      r.rax = r.orig_rax;
      r.rip -= 2;
    } else if (result == kRestartBlock) {
      r.rax = SYS_restart_syscall;
      r.rip -= 2;
    }
  }
  uint64_t syscall_at = r.rip;
  if (!IsSyscallAt(pid, syscall_at)) {
    auto found = SyscallInVdso(pid);
    if (!found.ok()) return detach(found.status());
    syscall_at = *found;
  }
  std::unique_ptr<Tracee> t(new Tracee(pid, std::move(saved), syscall_at));
  t->signals_ = std::move(signals);
  return t;
}

absl::Status Tracee::AwaitSyscallStop() {
  for (;;) {
    int status = 0;
    if (waitpid(pid_, &status, __WALL) != pid_) return Errno("waiting for it", pid_);
    if (!WIFSTOPPED(status)) {
      attached_ = false;
      return Gone(pid_, status);
    }
    const int event = status >> 16;
    const int sig = WSTOPSIG(status);
    if (event == 0 && sig == (SIGTRAP | 0x80)) return absl::OkStatus();
    if (event == PTRACE_EVENT_FORK) {
      unsigned long child = 0;
      if (ptrace(PTRACE_GETEVENTMSG, pid_, nullptr, &child) != 0) return Errno("reading its copy's pid", pid_);
      forked_ = static_cast<pid_t>(child);
    } else if (event == 0) {
      signals_.push_back(sig);  // held back while it is driven; sent again at Release
    }
    if (ptrace(PTRACE_SYSCALL, pid_, nullptr, nullptr) != 0) return Errno("resuming it", pid_);
  }
}

absl::Status Tracee::Start(long nr, std::initializer_list<uint64_t> args) {
  if (!attached_) return absl::FailedPreconditionError(absl::StrCat("process ", pid_, " is not held"));
  user_regs_struct r = saved_->regs;
  r.rip = syscall_at_;
  r.rax = static_cast<uint64_t>(nr);
  r.orig_rax = static_cast<uint64_t>(-1);  // no call of its own to make again
  unsigned long long* slots[] = {&r.rdi, &r.rsi, &r.rdx, &r.r10, &r.r8, &r.r9};
  size_t i = 0;
  for (uint64_t a : args) *slots[i++] = a;
  if (ptrace(PTRACE_SETREGS, pid_, nullptr, &r) != 0) return Errno("setting its registers", pid_);
  if (ptrace(PTRACE_SYSCALL, pid_, nullptr, nullptr) != 0) return Errno("resuming it", pid_);
  if (absl::Status s = AwaitSyscallStop(); !s.ok()) return s;  // the call's entry
  if (ptrace(PTRACE_SYSCALL, pid_, nullptr, nullptr) != 0) return Errno("resuming it", pid_);
  started_ = true;
  return absl::OkStatus();
}

absl::StatusOr<long> Tracee::Finish() {
  if (!started_) return absl::FailedPreconditionError("no call was started");
  started_ = false;
  if (absl::Status s = AwaitSyscallStop(); !s.ok()) return s;  // its exit
  user_regs_struct r{};
  if (ptrace(PTRACE_GETREGS, pid_, nullptr, &r) != 0) return Errno("reading its registers", pid_);
  return static_cast<long>(r.rax);
}

absl::StatusOr<long> Tracee::Call(long nr, std::initializer_list<uint64_t> args) {
  if (absl::Status s = Start(nr, args); !s.ok()) return s;
  return Finish();
}

absl::StatusOr<std::unique_ptr<Tracee>> Tracee::Fork() {
  forked_ = 0;
  absl::StatusOr<long> pid = Call(SYS_clone, {CLONE_PARENT | SIGCHLD, 0, 0, 0, 0});
  if (!pid.ok()) return pid.status();
  if (*pid < 0)
    return absl::InternalError(absl::StrCat("process ", pid_, ": clone: ", strerror(static_cast<int>(-*pid))));
  const pid_t child = forked_ != 0 ? forked_ : static_cast<pid_t>(*pid);
  int status = 0;  // it starts stopped (PTRACE_EVENT_STOP), traced by us
  if (waitpid(child, &status, __WALL) != child) return Errno("waiting for its copy", child);
  if (!WIFSTOPPED(status)) return Gone(child, status);
  auto saved = std::make_unique<Registers>(*saved_);
  std::unique_ptr<Tracee> copy(new Tracee(child, std::move(saved), syscall_at_));
  copy->scratch_ = scratch_;
  return copy;
}

absl::StatusOr<uint64_t> Tracee::Put(absl::string_view bytes) {
  scratch_ = (scratch_ - bytes.size()) & ~uint64_t{15};
  iovec local{const_cast<char*>(bytes.data()), bytes.size()};
  iovec remote{reinterpret_cast<void*>(scratch_), bytes.size()};
  if (process_vm_writev(pid_, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes.size())) {
    return Errno("writing into its stack", pid_);
  }
  return scratch_;
}

absl::Status Tracee::Release() {
  if (!attached_) return absl::OkStatus();
  attached_ = false;
  if (ptrace(PTRACE_SETREGS, pid_, nullptr, &saved_->regs) != 0) return Errno("restoring its registers", pid_);
  if (ptrace(PTRACE_DETACH, pid_, nullptr, nullptr) != 0) return Errno("detaching from it", pid_);
  for (int sig : signals_) kill(pid_, sig);
  return absl::OkStatus();
}

#else

struct Tracee::Registers {};
Tracee::Tracee(pid_t pid, std::unique_ptr<Registers> saved, uint64_t syscall_at)
    : pid_(pid), saved_(std::move(saved)), syscall_at_(syscall_at), scratch_(0) {}
Tracee::~Tracee() = default;
absl::StatusOr<std::unique_ptr<Tracee>> Tracee::Seize(pid_t) {
  return absl::UnimplementedError("driving a process's calls is implemented for x86_64 only");
}
absl::Status Tracee::AwaitSyscallStop() { return absl::UnimplementedError("x86_64 only"); }
absl::Status Tracee::Start(long, std::initializer_list<uint64_t>) { return AwaitSyscallStop(); }
absl::StatusOr<long> Tracee::Finish() { return AwaitSyscallStop(); }
absl::StatusOr<long> Tracee::Call(long, std::initializer_list<uint64_t>) { return AwaitSyscallStop(); }
absl::StatusOr<std::unique_ptr<Tracee>> Tracee::Fork() { return AwaitSyscallStop(); }
absl::StatusOr<uint64_t> Tracee::Put(absl::string_view) { return AwaitSyscallStop(); }
absl::Status Tracee::Release() { return absl::OkStatus(); }

#endif

}  // namespace corral::sandbox
