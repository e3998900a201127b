#include "services/sandbox_host/linux/process_sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/sandbox_host/linux/sub_ids.h"

namespace corral::sandbox {
namespace {

constexpr double kMinOrphanAgeSeconds = 3;

// The ids of `uid`'s live processes: `uid` and those of its block (sub_ids.h) that some process runs as.
absl::flat_hash_set<uid_t> LiveIdsOf(uid_t uid, std::vector<pid_t>* pids = nullptr) {
  absl::flat_hash_set<uid_t> ids;
  ForEachLiveProcess([&](pid_t pid, const std::vector<uid_t>& uids) {
    bool match = false;
    for (uid_t u : uids) {
      if (u == uid || SubIdOwner(u) == uid) {
        ids.insert(u);
        match = true;
      }
    }
    if (match && pids != nullptr) pids->push_back(pid);
  });
  return ids;
}

}  // namespace

void ForEachLiveProcess(const std::function<void(pid_t, const std::vector<uid_t>&)>& visit) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  // Each status is read with one read() into this buffer (the kernel makes the whole text at once; its State:
  // and Uid: lines come within the first kilobyte): a scan runs on every kill, fork and delete.
  char text[4096];
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    char path[64];
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
}

std::vector<pid_t> ProcessesOf(uid_t uid) {
  std::vector<pid_t> pids;
  LiveIdsOf(uid, &pids);
  return pids;
}

bool KillAllOf(uid_t uid, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    const absl::flat_hash_set<uid_t> ids = LiveIdsOf(uid);
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
  }
  return LiveIdsOf(uid).empty();
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
