#include "services/sandbox_host/linux/process_sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "services/sandbox_host/linux/sub_ids.h"

namespace corral::sandbox {
namespace {

constexpr double kMinOrphanAgeSeconds = 3;

// Whether `id` is `uid` or one of its block's.
bool Owns(uid_t uid, uid_t id) { return id == uid || SubIdOwner(id) == uid; }

// The ids of `uid`'s live processes: `uid` and those of its block (sub_ids.h) that some process runs as.
absl::flat_hash_set<uid_t> LiveIdsOf(uid_t uid, std::vector<pid_t>* pids = nullptr) {
  absl::flat_hash_set<uid_t> ids;
  ForEachLiveProcess(
      [&](pid_t pid, const std::vector<uid_t>& uids) {
        bool match = false;
        for (uid_t u : uids) {
          if (Owns(uid, u)) {
            ids.insert(u);
            match = true;
          }
        }
        if (match && pids != nullptr) pids->push_back(pid);
      },
      [uid](uid_t id) { return Owns(uid, id); });
  return ids;
}

// Whether `pid` is in process group `group` or carries `marker` in its environment (as exec'd: /proc's environ).
bool InTree(pid_t pid, pid_t group, const std::string& marker) {
  if (getpgid(pid) == group) return true;
  const std::vector<std::string> environ = EnvironOf(pid);
  return std::find(environ.begin(), environ.end(), marker) != environ.end();
}

// The kernel threads the last scan saw, by pid, with their /proc entry's inode number. A /proc/<pid> inode
// belongs to one task: the kernel drops a task's /proc entries when it is reaped, and a pid used again is a new
// task whose entry gets a new inode (procfs numbers each one it makes from a counter), so a pid listed with the
// same inode is the same kernel thread and needs no second look. A scan otherwise spends about a third of its
// time asking every kernel thread for its executable.
class KernelThreads {
 public:
  absl::flat_hash_map<pid_t, ino_t> Known() const {
    absl::MutexLock lock(&mu_);
    return known_;
  }
  void Replace(absl::flat_hash_map<pid_t, ino_t> seen) {
    absl::MutexLock lock(&mu_);
    known_ = std::move(seen);
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<pid_t, ino_t> known_ ABSL_GUARDED_BY(mu_);
};

KernelThreads& KnownKernelThreads() {
  static auto* threads = new KernelThreads();
  return *threads;
}

}  // namespace

void ForEachLiveProcess(const std::function<void(pid_t, const std::vector<uid_t>&)>& visit,
                        const std::function<bool(uid_t)>& may_be) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  // Each status is read with one read() into this buffer (the kernel makes the whole text at once; its State:
  // and Uid: lines come within the first kilobyte): a scan runs on every kill, fork and delete. Making that text
  // is most of a scan's cost, so with `may_be` a process's owner decides first whether it is read at all.
  char text[4096];
  char path[64];
  const absl::flat_hash_map<pid_t, ino_t> known = may_be ? KnownKernelThreads().Known() : decltype(known)();
  absl::flat_hash_map<pid_t, ino_t> kernel_threads;
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    if (may_be) {
      if (auto it = known.find(pid); it != known.end() && it->second == e->d_ino) {
        kernel_threads.insert(*it);
        continue;
      }
      struct stat st {};
      if (fstatat(dirfd(proc), e->d_name, &st, 0) != 0) continue;  // it has exited
      if (st.st_uid != 0 && !may_be(st.st_uid)) continue;
      // Root's: a root process, or a kernel thread (which has no executable: it is no sandbox's). A process
      // that is exiting has none either, and runs nothing more; a kernel thread that execs a usermode helper
      // (modprobe, a core dump pipe) keeps its inode and runs as root, which is no sandbox's either.
      snprintf(path, sizeof path, "%d/exe", pid);
      char target[8];
      if (st.st_uid == 0 && readlinkat(dirfd(proc), path, target, sizeof target) < 0 && errno == ENOENT) {
        if (e->d_ino == st.st_ino) kernel_threads.emplace(pid, st.st_ino);
        continue;
      }
    }
    snprintf(path, sizeof path, "%d/status", pid);
    const int fd = openat(dirfd(proc), path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // it has exited
    const ssize_t n = read(fd, text, sizeof text);
    close(fd);
    if (n <= 0) continue;
    bool dead = false;  // zombies run no code; whoever waits for them reaps them
    for (absl::string_view line : absl::StrSplit(absl::string_view(text, static_cast<size_t>(n)), '\n')) {
      if (absl::ConsumePrefix(&line, "State:")) {
        dead = absl::StrContains(line, 'Z') || absl::StrContains(line, 'X');
        continue;
      }
      if (!absl::ConsumePrefix(&line, "Uid:")) continue;
      if (dead) break;
      std::vector<uid_t> uids;  // real, effective, saved
      for (absl::string_view f : absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
        uint32_t u = 0;
        if (uids.size() < 3 && absl::SimpleAtoi(f, &u)) uids.push_back(u);
      }
      visit(pid, uids);
      break;
    }
  }
  closedir(proc);
  if (may_be) KnownKernelThreads().Replace(std::move(kernel_threads));
}

std::vector<pid_t> ProcessesOf(uid_t uid) {
  std::vector<pid_t> pids;
  LiveIdsOf(uid, &pids);
  return pids;
}

bool KillAllOf(uid_t uid, int rounds, size_t* found) {
  for (int round = 0; round < rounds; ++round) {
    std::vector<pid_t> pids;
    const absl::flat_hash_set<uid_t> ids = LiveIdsOf(uid, round == 0 && found != nullptr ? &pids : nullptr);
    if (round == 0 && found != nullptr) *found = pids.size();
    if (ids.empty()) return true;
    // kill(-1) from a process running as an id reaches exactly that id's processes, wherever they are in the
    // process tree; forks racing with it are caught by the next round.
    for (uid_t id : ids) {
      pid_t killer = fork();
      if (killer == 0) {
        syscall(SYS_close_range, 3u, ~0u, 0u);  // hold none of the host's descriptors
        if (setresuid(id, id, id) != 0) _exit(1);
        kill(-1, SIGKILL);
        _exit(0);
      }
      if (killer > 0) waitpid(killer, nullptr, 0);
    }
    // A killed process is listed until its exit is done, which takes a while for a large address space or a
    // process waiting on its disk: the next round looks after a moment (1, 2, 4 ... 100 ms; 1.4 s in all).
    usleep(static_cast<useconds_t>(std::min(1000 << std::min(round, 7), 100'000)));
  }
  return LiveIdsOf(uid).empty();
}

std::vector<std::string> EnvironOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::vector<std::string> vars;
  for (std::string var; std::getline(in, var, '\0');) vars.push_back(std::move(var));
  return vars;
}

bool KillProcessTree(uid_t uid, pid_t group, const std::string& marker, int rounds) {
  for (int round = 0; round <= rounds; ++round) {
    std::vector<pid_t> found;
    ForEachLiveProcess(
        [&](pid_t pid, const std::vector<uid_t>& uids) {
          const bool ours = std::any_of(uids.begin(), uids.end(), [&](uid_t u) { return Owns(uid, u); });
          if (ours && InTree(pid, group, marker)) found.push_back(pid);
        },
        [uid](uid_t id) { return Owns(uid, id); });
    if (found.empty()) return true;
    if (round == rounds) break;
    std::vector<pollfd> signalled;
    for (pid_t pid : found) {
      // Checked again through the pidfd: if the pid was reused since the scan, the check sees the new process.
      const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
      if (fd < 0) continue;  // it has exited
      struct stat st;
      if (stat(absl::StrCat("/proc/", pid).c_str(), &st) == 0 && Owns(uid, st.st_uid) && InTree(pid, group, marker) &&
          syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0) == 0) {
        signalled.push_back({.fd = fd, .events = POLLIN, .revents = 0});
      } else {
        close(fd);
      }
    }
    // A killed process runs until the kernel has torn it down: wait for each to exit (its pidfd turns readable),
    // at most a second a round, so the next scan sees only what forked meanwhile.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (pollfd& p : signalled) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      while (poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) < 0 && errno == EINTR) {
      }
      close(p.fd);
    }
  }
  return false;
}

void ReapOrphans(const absl::flat_hash_set<pid_t>& tracked) {
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
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    const char state = line[close + 2];
    pid_t ppid = 0;
    const size_t space = line.find(' ', close + 4);
    if (state != 'Z' || !absl::SimpleAtoi(line.substr(close + 4, space - close - 4), &ppid) || ppid != self) continue;
    // Field 22 (starttime) counts from field 3 (state), the first after the command name.
    std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
    double started = 0;
    if (fields.size() > 19 && absl::SimpleAtod(fields[19], &started) &&
        uptime - started / ticks < kMinOrphanAgeSeconds) {
      continue;
    }
    waitpid(pid, nullptr, WNOHANG);
  }
  closedir(proc);
}

}  // namespace corral::sandbox
