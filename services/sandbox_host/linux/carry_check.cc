#include "services/sandbox_host/linux/carry_check.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "libs/core/status_macros.h"

namespace corral::sandbox {
namespace {

absl::Status Differs(const std::string& what) { return absl::PermissionDeniedError(absl::StrCat("carried: ", what)); }

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

bool SameAsFd(const std::string& proc_path, int fd) {
  struct stat a {
  }, b{};
  return stat(proc_path.c_str(), &a) == 0 && fstat(fd, &b) == 0 && SameFile(a, b);
}

uint64_t MountId(const char* path, int dirfd, int flags) {
  struct statx sx {};
  if (statx(dirfd, path, flags, STATX_MNT_ID, &sx) != 0 || !(sx.stx_mask & STATX_MNT_ID)) return 0;
  return sx.stx_mnt_id;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7'; };
    if (s[i] == '\\' && octal(1) && octal(2) && octal(3)) {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

absl::Status CheckStatus(pid_t pid, const CarryPlan& plan) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return Differs("the process is gone");
  const std::string uid = absl::StrCat(plan.uid), gid = absl::StrCat(plan.gid);
  int seen = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f.empty()) continue;
    const absl::string_view key = f[0];
    auto all_are = [&](const std::string& want) {
      if (f.size() != 5) return false;
      for (size_t i = 1; i < 5; ++i) {
        if (f[i] != want) return false;
      }
      return true;
    };
    auto one_is = [&](absl::string_view want) { return f.size() == 2 && f[1] == want; };
    if (key == "Uid:") {
      if (!all_are(uid)) return Differs(absl::StrCat("its uids are ", line));
    } else if (key == "Gid:") {
      if (!all_are(gid)) return Differs(absl::StrCat("its gids are ", line));
    } else if (key == "Groups:") {
      if (f.size() != 1) return Differs("it has supplementary groups");
    } else if (key == "CapInh:" || key == "CapPrm:" || key == "CapEff:" || key == "CapAmb:") {
      // A copy keeps none; the parent's own process, fork-ready still, the gated two (fork_gate.h).
      if (!one_is(plan.fork_ready ? "0000000000240000" : "0000000000000000")) {
        return Differs(absl::StrCat("its capabilities are not what they should be: ", line));
      }
    } else if (key == "NoNewPrivs:") {
      if (!one_is("1")) return Differs("no_new_privs is off");
    } else if (key == "Seccomp:") {
      if (!one_is("2")) return Differs("its filter is gone");
    } else if (key == "TracerPid:") {
      // Traced by no process of the sandbox's: none, or the host driving its carry (driven_carry.h).
      // (TracerPid names the tracing thread.)
      const bool by_host = f.size() == 2 && access(absl::StrCat("/proc/self/task/", f[1]).c_str(), F_OK) == 0;
      if (!one_is("0") && !by_host) return Differs("it is traced");
    } else if (key == "Threads:") {
      if (!one_is("1")) return Differs("it has more than one thread");
    } else {
      continue;
    }
    ++seen;
  }
  if (seen != 11) return Differs("its status could not be read");
  return absl::OkStatus();
}

// A copy leads a session and process group of its own (not its parent's: a kill of the parent's group would end
// it).
absl::Status CheckSession(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end = stat.rfind(')');  // after the command's name, which may hold anything
  if (end == std::string::npos) return Differs("its stat could not be read");
  std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(stat).substr(end + 2), ' ');
  // state ppid pgrp session
  const std::string self = absl::StrCat(pid);
  if (f.size() < 4 || f[2] != self || f[3] != self) return Differs("it is still in its parent's process group");
  return absl::OkStatus();
}

absl::Status CheckDescriptors(pid_t pid, const CarryPlan& plan) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Differs("its descriptors could not be read");
  std::vector<int> fds;
  while (dirent* e = readdir(d)) {
    int fd;
    if (absl::SimpleAtoi(e->d_name, &fd)) fds.push_back(fd);
  }
  closedir(d);
  const int given[3] = {plan.stdin_fd.get(), plan.stdout_fd.get(), plan.stderr_fd.get()};
  for (int fd : fds) {
    if (fd == kCarryControlFd && plan.fork_ready) {
      if (!plan.control.valid() || !SameAsFd(absl::StrCat(dir, "/", fd), plan.control.get())) {
        return Differs("its control descriptor is not its own");
      }
      continue;
    }
    struct stat it {};
    if (stat(absl::StrCat(dir, "/", fd).c_str(), &it) != 0) return Differs(absl::StrCat("it kept descriptor ", fd));
    // A file or directory would be one of the layer the fork froze, which its children see.
    if (S_ISREG(it.st_mode) || S_ISDIR(it.st_mode)) return Differs(absl::StrCat("its descriptor ", fd, " is a file"));
    if (fd > 2) {
      // Only a duplicate of one of its streams (a shell keeps one of its input), which are checked below.
      bool stream = false;
      for (int k = 0; k < 3; ++k) {
        struct stat s {};
        stream = stream || (stat(absl::StrCat(dir, "/", k).c_str(), &s) == 0 && SameFile(it, s));
      }
      if (!stream) return Differs(absl::StrCat("it kept descriptor ", fd));
      continue;
    }
    if (given[fd] >= 0 && !SameAsFd(absl::StrCat(dir, "/", fd), given[fd])) {
      return Differs(absl::StrCat("its descriptor ", fd, " is not the one it was given"));
    }
  }
  return absl::OkStatus();
}

// A shared mapping the process could write, or one that is not a plain file's (anonymous, System V, memfd, a
// device, a deleted file): what its parent or a sibling could write too. A read-only file mapping (the C
// library's locale cache) shares nothing it could write.
absl::Status CheckMemory(pid_t pid) {
  // Most processes share no mapping at all, which /proc/<pid>/maps tells cheaply (its 's', VM_MAYSHARE, is set on
  // every mapping smaps calls "sh"); smaps walks every page of every mapping, a long read for a process holding
  // much memory, so it is read only for one that may share.
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  if (!maps) return Differs("its memory map could not be read");
  bool may_share = false;
  for (std::string line; !may_share && std::getline(maps, line);) {
    const size_t perms = line.find(' ');
    may_share = perms != std::string::npos && perms + 4 < line.size() && line[perms + 4] == 's';
  }
  if (!may_share) return absl::OkStatus();
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps"));
  if (!in) return Differs("its memory map could not be read");
  std::string line, mapping;
  while (std::getline(in, line)) {
    if (!line.empty() && absl::ascii_isxdigit(line[0]) && line.find('-') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      mapping = line;
      continue;
    }
    if (!absl::StartsWith(line, "VmFlags:")) continue;
    std::vector<absl::string_view> flags = absl::StrSplit(absl::string_view(line).substr(8), ' ', absl::SkipEmpty());
    auto has = [&](absl::string_view f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
    if (!has("sh")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(mapping, ' ', absl::SkipEmpty());
    const absl::string_view name = f.size() >= 6 ? f[5] : "";
    const bool plain_file = absl::StartsWith(name, "/") && !absl::StartsWith(name, "/dev/") &&
                            !absl::StartsWith(name, "/SYSV") && !absl::StartsWith(name, "/memfd:") &&
                            !absl::StrContains(mapping, "(deleted)");
    if (has("mw") || !plain_file) return Differs(absl::StrCat("it shares memory with other processes: ", mapping));
  }
  return absl::OkStatus();
}

absl::Status CheckMounts(pid_t pid, const CarryPlan& plan) {
  if (plan.mounts.empty()) return absl::OkStatus();
  std::ifstream in(absl::StrCat("/proc/", pid, "/mountinfo"));
  if (!in) return Differs("its mounts could not be read");
  std::vector<std::pair<uint64_t, std::string>> mounts;  // id, mount point
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    uint64_t id;
    if (f.size() > 4 && absl::SimpleAtoi(f[0], &id)) mounts.emplace_back(id, Unescape(f[4]));
  }
  std::vector<uint64_t> ids;
  for (const CarryPlan::Mount& m : plan.mounts) {
    const uint64_t id = MountId("", m.tree.get(), AT_EMPTY_PATH);
    bool found = false;
    for (const auto& [mid, point] : mounts) found = found || (mid == id && point == m.path);
    if (id == 0 || !found) return Differs(absl::StrCat("its tree is not mounted at ", m.path));
    ids.push_back(id);
  }
  // Its working directory, when among the places the trees cover (always, for the parent's own process: its old
  // one is in the layer its children share), must be on one of them: an old one is its parent's.
  const std::string cwd_link = absl::StrCat("/proc/", pid, "/cwd");
  char buf[4096];
  const ssize_t n = readlink(cwd_link.c_str(), buf, sizeof(buf) - 1);
  const std::string path = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  bool covered = plan.fork_ready;
  for (const CarryPlan::Mount& m : plan.mounts)
    covered = covered || path == m.path || absl::StartsWith(path, m.path + "/");
  if (!covered) return absl::OkStatus();
  const uint64_t cwd = MountId(cwd_link.c_str(), AT_FDCWD, 0);
  for (uint64_t id : ids) {
    if (id == cwd) return absl::OkStatus();
  }
  return Differs("its working directory is not on a tree it was given");
}

}  // namespace

absl::Status CheckCarried(pid_t pid, const CarryPlan& plan) {
  if (absl::Status s = CheckStatus(pid, plan); !s.ok()) return s;
  const std::string ns = absl::StrCat("/proc/", pid, "/ns/");
  if (plan.userns.valid() && !SameAsFd(ns + "user", plan.userns.get())) return Differs("not in its user namespace");
  if (plan.netns.valid() && !SameAsFd(ns + "net", plan.netns.get())) return Differs("not in its network namespace");
  if (plan.mntns.valid() && !SameAsFd(ns + "mnt", plan.mntns.get())) return Differs("not in its mount namespace");
  if (absl::Status s = CheckDescriptors(pid, plan); !s.ok()) return s;
  if (!plan.fork_ready) CORRAL_RETURN_IF_ERROR(CheckSession(pid));
  if (absl::Status s = CheckMemory(pid); !s.ok()) return s;
  return CheckMounts(pid, plan);
}

}  // namespace corral::sandbox
