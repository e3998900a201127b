#include "services/sandbox_host/namespaces.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace corral::sandbox {
namespace {

// Steps the helper reports when one fails.
enum Step : int { kUnshare = 1, kPrivate, kProc, kTmp, kTaskPath, kLoopback };

const char* StepName(int step) {
  switch (step) {
    case kUnshare: return "unshare";
    case kPrivate: return "making mounts private";
    case kProc: return "mounting /proc";
    case kTmp: return "binding /tmp";
    case kTaskPath: return "binding a task path";
    case kLoopback: return "bringing up loopback";
    default: return "setup";
  }
}

struct Report {
  int step;  // 0 = ready
  int err;
  int hidepid;
};

}  // namespace

bool CanCreateMountNamespaces() {
  pid_t pid = fork();
  if (pid == 0) _exit(unshare(CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

absl::StatusOr<SandboxNamespaces> CreateNamespaces(const std::string& home, const std::vector<std::string>& task_paths,
                                                   bool private_network) {
  // Everything the helper needs is prepared before fork.
  const std::string tmp_source = home + "/.tmp";
  std::vector<std::pair<std::string, std::string>> binds;  // source in home → mount point
  for (const std::string& p : task_paths) {
    std::error_code ec;
    std::filesystem::create_directories(p, ec);  // an empty mount point on the host (not a mount)
    binds.emplace_back(home + p, p);
  }
  int report_pipe[2], hold_pipe[2];
  if (pipe2(report_pipe, O_CLOEXEC) != 0 || pipe2(hold_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  UniqueFd report_r(report_pipe[0]), report_w(report_pipe[1]), hold_r(hold_pipe[0]), hold_w(hold_pipe[1]);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Keep only our two pipe ends: descriptors inherited from concurrent creates (other helpers' pipes, the
    // host's sockets) must not stay open in this helper.
    const int keep_a = std::min(report_w.get(), hold_r.get()), keep_b = std::max(report_w.get(), hold_r.get());
    syscall(SYS_close_range, 3u, static_cast<unsigned>(keep_a - 1), 0u);
    syscall(SYS_close_range, static_cast<unsigned>(keep_a + 1), static_cast<unsigned>(keep_b - 1), 0u);
    syscall(SYS_close_range, static_cast<unsigned>(keep_b + 1), ~0u, 0u);
    auto fail = [&](int step) {
      Report r{step, errno, 0};
      ssize_t ignored = write(report_w.get(), &r, sizeof(r));
      (void)ignored;
      _exit(1);
    };
    if (unshare(CLONE_NEWNS | (private_network ? CLONE_NEWNET : 0)) != 0) fail(kUnshare);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(kPrivate);
    int hidepid = 1;
    const unsigned long proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    if (mount("proc", "/proc", "proc", proc_flags, "hidepid=invisible") != 0 &&
        mount("proc", "/proc", "proc", proc_flags, "hidepid=2") != 0) {
      hidepid = 0;
      if (mount("proc", "/proc", "proc", proc_flags, nullptr) != 0) fail(kProc);
    }
    for (const auto& [source, target] : binds) {
      if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) fail(kTaskPath);
    }
    // Last: a home below /tmp would be hidden by this bind (the host refuses such a root).
    if (mount(tmp_source.c_str(), "/tmp", nullptr, MS_BIND | MS_REC, nullptr) != 0) fail(kTmp);
    if (private_network) {
      int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      ifreq ifr{};
      strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
      if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) fail(kLoopback);
      ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
      if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) fail(kLoopback);
    }
    Report ready{0, 0, hidepid};
    ssize_t ignored = write(report_w.get(), &ready, sizeof(ready));
    (void)ignored;
    char c;
    ignored = read(hold_r.get(), &c, 1);  // until the host has opened the namespaces (it writes one byte)
    _exit(0);
  }
  report_w.Reset();
  hold_r.Reset();
  Report report{};
  ssize_t n = -1;
  pollfd pfd{report_r.get(), POLLIN, 0};
  if (poll(&pfd, 1, 30000) == 1) {  // a helper that neither reports nor dies within 30 s is broken
    do {
      n = read(report_r.get(), &report, sizeof(report));
    } while (n < 0 && errno == EINTR);
  }
  SandboxNamespaces ns;
  absl::Status status;
  if (n != static_cast<ssize_t>(sizeof(report))) {
    status = absl::InternalError("the namespace helper died");
  } else if (report.step != 0) {
    status = absl::InternalError(
        absl::StrCat("creating the sandbox's namespaces failed at ", StepName(report.step), ": ", strerror(report.err)));
  } else {
    ns.hidepid = report.hidepid != 0;
    ns.mnt.Reset(open(absl::StrCat("/proc/", pid, "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
    if (private_network) ns.net.Reset(open(absl::StrCat("/proc/", pid, "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    // The helper's root, seen through its mount namespace, leads to the sandbox's own /proc.
    ns.proc_root.Reset(open(absl::StrCat("/proc/", pid, "/root/proc").c_str(), O_PATH | O_CLOEXEC));
    if (!ns.mnt.valid() || (private_network && !ns.net.valid()) || !ns.proc_root.valid()) {
      status = absl::InternalError(absl::StrCat("cannot open the sandbox's namespaces: ", strerror(errno)));
    }
  }
  const char done = 1;
  ssize_t ignored = write(hold_w.get(), &done, 1);  // lets the helper exit
  (void)ignored;
  hold_w.Reset();
  if (n != static_cast<ssize_t>(sizeof(report))) kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  if (!status.ok()) return status;
  return ns;
}

}  // namespace corral::sandbox
