#include "services/sandbox_host/linux/user_namespaces.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "services/sandbox_host/linux/namespaces.h"

namespace corral::sandbox {
namespace {

constexpr size_t kStack = 64 * 1024;

struct Holder {
  int fd_to_wait_on;
  int ready_fd;   // nested only: written once the namespace exists
  int parent_fd;  // -1: the namespace was made by the clone itself
  pid_t host;
};

// What a holder runs on: its arguments and its stack, in memory it shares with the host (CLONE_VM), kept until
// it has exited.
struct HolderBlock {
  Holder holder;
  alignas(16) char stack[kStack];
};

int HoldUserNamespace(void* raw) {
  const Holder& holder = *static_cast<const Holder*>(raw);
  // It holds a copy of the pipe's write end: were the host killed before writing, it would wait forever (and
  // keep the host's descriptors open, its root's lock among them). It dies with the host.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != holder.host) return 0;
  if (holder.parent_fd >= 0) {
    const char made = setns(holder.parent_fd, CLONE_NEWUSER) == 0 && unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
    if (write(holder.ready_fd, &made, 1) != 1 || made != 'y') return 1;
  }
  char c;
  (void)!read(holder.fd_to_wait_on, &c, 1);  // until the maps are written and the namespace opened
  return 0;
}

bool WriteAll(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) close(fd);
  return ok;
}

// The three files of `pid`'s id maps, in the order the kernel needs; system calls only (a helper may run it),
// from inside the parent namespace when `parent_fd` is set, as the kernel requires of the writer of a nested one.
struct MapWriter {
  int parent_fd;
  pid_t pid;
  const std::string* uid_map;
  const std::string* setgroups;
  const std::string* gid_map;
  bool ok = false;
  int err = 0;
};

int WriteMaps(void* raw) {
  auto* w = static_cast<MapWriter*>(raw);
  char path[64];
  auto at = [&](const char* name) {
    snprintf(path, sizeof(path), "/proc/%d/%s", static_cast<int>(w->pid), name);
    return path;
  };
  w->ok = (w->parent_fd < 0 || setns(w->parent_fd, CLONE_NEWUSER) == 0) && WriteAll(at("uid_map"), *w->uid_map) &&
          WriteAll(at("setgroups"), *w->setgroups) && WriteAll(at("gid_map"), *w->gid_map);
  w->err = errno;
  return 0;
}

// Holders told to exit and not yet waited for. Waiting for each at once was half of a namespace's cost (the
// holder's exit, after a switch to it), so a holder is reaped later, by pidfd (never by a pid another process may
// have taken since); its block (its arguments and stack, shared with it) is freed only then.
class PartedHolders {
 public:
  void Add(UniqueFd pidfd, std::unique_ptr<HolderBlock> block) {
    absl::MutexLock lock(&mu_);
    ReapExitedLocked();
    parted_.emplace_back(std::move(pidfd), std::move(block));
  }

 private:
  void ReapExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::erase_if(parted_, [](const std::pair<UniqueFd, std::unique_ptr<HolderBlock>>& p) {
      pollfd exited{.fd = p.first.get(), .events = POLLIN, .revents = 0};
      if (poll(&exited, 1, 0) != 1) return false;  // still running: it reads its pipe, then returns
      siginfo_t info{};
      // ECHILD: the host's orphan reaper took it first; either way it is gone.
      (void)waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(p.first.get()), &info, WEXITED | WNOHANG);
      return true;
    });
  }

  absl::Mutex mu_;
  std::vector<std::pair<UniqueFd, std::unique_ptr<HolderBlock>>> parted_ ABSL_GUARDED_BY(mu_);
};

PartedHolders& Parted() {
  static auto* parted = new PartedHolders();
  return *parted;
}

std::string Lines(const IdMap& map) {
  std::string text;
  for (const IdExtent& e : map) absl::StrAppend(&text, e.inside, " ", e.outside, " ", e.count, "\n");
  return text;
}

}  // namespace

absl::StatusOr<UniqueFd> CreateUserNamespace(const IdMap& uids, const IdMap& gids, bool setgroups, int parent_fd) {
  int pipefd[2], readyfd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  UniqueFd read_end(pipefd[0]), write_end(pipefd[1]);
  if (pipe2(readyfd, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  UniqueFd ready_r(readyfd[0]), ready_w(readyfd[1]);
  auto block = std::make_unique<HolderBlock>();
  block->holder = Holder{read_end.get(), ready_w.get(), parent_fd, getpid()};
  // Joining a user namespace needs a process of its own (not sharing our filesystem information).
  const int flags = (parent_fd >= 0 ? 0 : CLONE_NEWUSER) | CLONE_VM | SIGCHLD;
  int pidfd = -1;
  char* const top = block->stack + kStack;
  pid_t pid = clone(HoldUserNamespace, top, flags | CLONE_PIDFD, &block->holder, &pidfd);
  if (pid < 0 && errno == EINVAL) pid = clone(HoldUserNamespace, top, flags, &block->holder);  // Linux < 5.2
  if (pid < 0) return absl::InternalError(absl::StrCat("clone(CLONE_NEWUSER): ", strerror(errno)));
  UniqueFd holder_fd(pidfd);
  char made = 'y';
  if (parent_fd >= 0 && read(ready_r.get(), &made, 1) != 1) made = 'n';
  const std::string uid_map = Lines(uids), gid_map = Lines(gids), allow = setgroups ? "allow" : "deny";
  MapWriter writer{parent_fd, pid, &uid_map, &allow, &gid_map};
  if (made == 'y' && parent_fd < 0) {
    WriteMaps(&writer);
  } else if (made == 'y') {
    (void)RunVforkHelper(WriteMaps, &writer);
  }
  const bool mapped = writer.ok;
  const int saved = writer.err;
  UniqueFd ns(open(absl::StrCat("/proc/", pid, "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  // The holder's read returns and it exits (closing our end would not do: it holds a copy of it).
  if (write(write_end.get(), "x", 1) != 1) kill(pid, SIGKILL);
  if (holder_fd.valid()) {
    Parted().Add(std::move(holder_fd), std::move(block));
  } else {
    waitpid(pid, nullptr, 0);
  }
  if (made != 'y') return absl::InternalError("making a user namespace inside another");
  if (!mapped) return absl::InternalError(absl::StrCat("writing the user namespace's id maps: ", strerror(saved)));
  if (ns.get() < 0) return absl::InternalError(absl::StrCat("opening the user namespace: ", strerror(errno)));
  return ns;
}

absl::StatusOr<UniqueFd> CreateUserNamespace(uid_t uid, gid_t gid, uid_t inside_uid, gid_t inside_gid) {
  return CreateUserNamespace(IdMap{{inside_uid, uid, 1}}, IdMap{{inside_gid, gid, 1}});
}

}  // namespace corral::sandbox
