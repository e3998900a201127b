#include "services/sandbox_host/linux/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "services/sandbox_host/linux/carry_plan.h"
#include "services/sandbox_host/linux/fork_gate.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/open_in_root.h"

namespace corral::sandbox {
namespace {

// Steps the child reports through the error pipe when one fails.
enum Stage : int {
  kDup = 1,
  kSetns,
  kCgroup,
  kRlimit,
  kSetgroups,
  kSetgid,
  kSetuid,
  kNoNewPrivs,
  kLandlock,
  kForkGate,
  kChdir,
  kExec
};

const char* StageName(int stage) {
  switch (stage) {
    case kDup: return "redirecting stdio";
    case kSetns: return "joining the sandbox's namespaces";
    case kCgroup: return "joining the sandbox's cgroup";
    case kRlimit: return "setting rlimits";
    case kSetgroups: return "dropping supplementary groups";
    case kSetgid: return "switching gid";
    case kSetuid: return "switching uid";
    case kNoNewPrivs: return "setting no_new_privs";
    case kLandlock: return "enforcing Landlock";
    case kForkGate: return "keeping the fork-ready capabilities under the gate";
    case kChdir: return "entering the working directory";
    case kExec: return "exec";
    default: return "setup";
  }
}

struct ChildError {
  int stage;
  int err;
};

[[noreturn]] void ChildFail(int error_fd, int stage) {
  ChildError e{stage, errno};
  ssize_t ignored = write(error_fd, &e, sizeof(e));
  (void)ignored;
  _exit(stage == kExec ? (e.err == ENOENT ? 127 : 126) : 125);
}

bool IsExecutable(const struct stat& st) { return S_ISREG(st.st_mode) && (st.st_mode & 0111); }

// argv[0] searched in the PATH of `env`, in the host's filesystem or (root_fd >= 0) an image's.
std::string Resolve(const std::string& cmd, const std::vector<std::string>& env, int root_fd) {
  if (cmd.find('/') != std::string::npos) return cmd;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& kv : env) {
    if (absl::StartsWith(kv, "PATH=")) path = kv.substr(5);
  }
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", cmd);
    struct stat st {};
    if (root_fd >= 0) {
      UniqueFd fd(OpenInRoot(root_fd, candidate, O_PATH, /*same_mount=*/false));
      if (fd.valid() && fstat(fd.get(), &st) == 0 && IsExecutable(st)) return candidate;
    } else if (stat(candidate.c_str(), &st) == 0 && IsExecutable(st)) {
      return candidate;
    }
  }
  return cmd;  // exec will fail with ENOENT, reported as exit 127
}

bool SetLimit(int resource, int64_t value) {
  if (value <= 0) return true;
  rlimit rl{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
  return setrlimit(resource, &rl) == 0;
}

}  // namespace

absl::Status ValidateRlimits(const Rlimits& r, const Rlimits& c) {
  struct Check {
    const char* name;
    int64_t value, ceiling;
  } checks[] = {{"nproc", r.nproc, c.nproc},
                {"address_space_bytes", r.address_space_bytes, c.address_space_bytes},
                {"nofile", r.nofile, c.nofile},
                {"file_size_bytes", r.file_size_bytes, c.file_size_bytes},
                {"cpu_seconds", r.cpu_seconds, c.cpu_seconds}};
  for (const Check& check : checks) {
    if (check.value < 0) return absl::InvalidArgumentError(absl::StrCat(check.name, " must not be negative"));
    if (check.ceiling > 0 && check.value > check.ceiling) {
      return absl::InvalidArgumentError(
          absl::StrCat(check.name, " ", check.value, " is above the host's ceiling of ", check.ceiling));
    }
  }
  return absl::OkStatus();
}

namespace {

// Everything the child needs, prepared by the host before the clone.
struct ChildArgs {
  const SpawnSpec* spec;
  const char* path;
  char* const* argv;
  char* const* envp;
  int stdin_fd, out_w, err_w, status_w;
  int gate_w;  // fork-ready: where the gate's listener goes
};

// Runs in the child, which shares the host's memory until it execs (CLONE_VM|CLONE_VFORK, as posix_spawn does):
// only its own stack is written, and credentials change through raw syscalls, because glibc's wrappers would
// broadcast the change to every thread of the host.
int ChildMain(void* arg) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(arg);
  const SpawnSpec& spec = *a.spec;
  const int efd = a.status_w;
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);  // the host ignores SIGPIPE; sandbox processes must not inherit that
  setsid();                           // own session and process group: a timeout kills the whole group
  if (dup2(a.stdin_fd, 0) < 0 || dup2(a.out_w, 1) < 0 || dup2(a.err_w, 2) < 0) ChildFail(efd, kDup);
  if (spec.mountns_fd >= 0 && setns(spec.mountns_fd, CLONE_NEWNS) != 0) ChildFail(efd, kSetns);
  if (spec.netns_fd >= 0 && setns(spec.netns_fd, CLONE_NEWNET) != 0) ChildFail(efd, kSetns);
  for (int fd : spec.cgroup_procs_fds) {
    if (write(fd, "0", 1) != 1) ChildFail(efd, kCgroup);  // "0" moves the writing process
  }
  const Rlimits& l = spec.limits;
  if (!SetLimit(RLIMIT_NPROC, l.nproc) || !SetLimit(RLIMIT_AS, l.address_space_bytes) ||
      !SetLimit(RLIMIT_NOFILE, l.nofile) || !SetLimit(RLIMIT_FSIZE, l.file_size_bytes) ||
      !SetLimit(RLIMIT_CPU, l.cpu_seconds) || !SetLimit(RLIMIT_DATA, l.data_bytes)) {
    ChildFail(efd, kRlimit);
  }
  if (!l.core_dumps) {
    rlimit none_core{0, 0};
    if (setrlimit(RLIMIT_CORE, &none_core) != 0) ChildFail(efd, kRlimit);
  }
  if (syscall(SYS_setgroups, 0, nullptr) != 0) ChildFail(efd, kSetgroups);  // before a user namespace denies it
  const bool fork_ready = spec.family_userns_fd >= 0;
  const int userns_fd = fork_ready ? spec.family_userns_fd : spec.userns_fd;
  if (userns_fd >= 0 && setns(userns_fd, CLONE_NEWUSER) != 0) ChildFail(efd, kSetns);
  if (fork_ready && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) ChildFail(efd, kForkGate);
  if (syscall(SYS_setresgid, spec.gid, spec.gid, spec.gid) != 0) ChildFail(efd, kSetgid);
  if (syscall(SYS_setresuid, spec.uid, spec.uid, spec.uid) != 0) ChildFail(efd, kSetuid);
  if (fork_ready) {
    if (int e = KeepForkCapabilities(); e != 0) {
      errno = e;
      ChildFail(efd, kForkGate);
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(efd, kNoNewPrivs);
  if (spec.landlock_fd >= 0) {
    int e = RestrictSelf(spec.landlock_fd);
    if (e != 0) {
      errno = e;
      ChildFail(efd, kLandlock);
    }
  }
  if (fork_ready) {
    const int listener = InstallForkGate();
    if (listener < 0 || !SendFd(a.gate_w, listener)) ChildFail(efd, kForkGate);
    close(listener);
  }
  if (spec.control_fd >= 0) {  // last: descriptor 3 may have been one the steps above needed
    const bool given = spec.control_fd == kCarryControlFd ? fcntl(kCarryControlFd, F_SETFD, 0) == 0
                                                          : dup2(spec.control_fd, kCarryControlFd) == kCarryControlFd;
    if (!given) ChildFail(efd, kDup);
  }
  // Nothing else the host holds reaches the program: a descriptor it inherited without close-on-exec (from
  // whoever started it) closes at exec, as the status pipe does.
  const unsigned first = spec.control_fd >= 0 ? kCarryControlFd + 1 : 3;
  if (syscall(SYS_close_range, first, ~0u, CLOSE_RANGE_CLOEXEC) != 0) ChildFail(efd, kDup);
  if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) ChildFail(efd, kChdir);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // last: the mask survives exec
  execve(a.path, a.argv, a.envp);
  ChildFail(efd, kExec);
}

}  // namespace

absl::StatusOr<Spawned> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty command");
  // Everything the child needs is built here: the child makes only async-signal-safe calls.
  const std::string path = Resolve(spec.argv[0], spec.env, spec.root_fd);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in[2] = {-1, -1}, out[2], err[2], status_pipe[2];
  if ((spec.pipe_stdin && pipe2(in, O_CLOEXEC) != 0) || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(status_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  UniqueFd in_r(in[0]), in_w(in[1]), out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  UniqueFd status_r(status_pipe[0]), status_w(status_pipe[1]);
  UniqueFd null_fd(spec.pipe_stdin ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC));
  int gate_pair[2] = {-1, -1};
  if (spec.family_userns_fd >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate_pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  UniqueFd gate_r(gate_pair[0]), gate_w(gate_pair[1]);
  ChildArgs args{&spec,       path.c_str(), argv.data(),    envp.data(), spec.pipe_stdin ? in_r.get() : null_fd.get(),
                 out_w.get(), err_w.get(),  status_w.get(), gate_w.get()};

  // The child borrows our memory until it execs; no signal handler may run in it meanwhile.
  constexpr size_t kStack = 64 * 1024;
  std::unique_ptr<char[]> stack(new char[kStack]);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(ChildMain, stack.get() + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return absl::InternalError(absl::StrCat("clone: ", strerror(clone_errno)));
  status_w.Reset();
  gate_w.Reset();
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();
  ChildError child_error{};
  ssize_t n;
  do {
    n = read(status_r.get(), &child_error, sizeof(child_error));
  } while (n < 0 && errno == EINTR);
  Spawned result;
  result.pid = pid;
  if (n == static_cast<ssize_t>(sizeof(child_error))) {
    if (child_error.stage != kExec) {
      waitpid(pid, nullptr, 0);
      return absl::InternalError(absl::StrCat("sandbox process setup failed while ", StageName(child_error.stage), ": ",
                                              strerror(child_error.err)));
    }
    result.exec_errno = child_error.err;
  }
  if (gate_r.valid() && result.exec_errno == 0) {
    auto listener = ReceiveFd(gate_r.get());  // sent before exec: already waiting in the socket
    if (!listener.ok()) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return listener.status();
    }
    result.gate = *std::move(listener);
  }
  fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  result.stdin_fd = std::move(in_w);
  result.stdout_fd = std::move(out_r);
  result.stderr_fd = std::move(err_r);
  return result;
}

}  // namespace corral::sandbox
