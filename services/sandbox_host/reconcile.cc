#include "services/sandbox_host/reconcile.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "libs/core/clock.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/linux/sub_ids.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// The sandbox a process says it belongs to: its CORRAL_SANDBOX_ID, or the sandbox cgroup it is in.
bool BelongsTo(pid_t pid, const absl::flat_hash_set<std::string>& ids) {
  for (absl::string_view var : EnvironOf(pid)) {
    if (absl::ConsumePrefix(&var, "CORRAL_SANDBOX_ID=") && ids.contains(var)) return true;
  }
  const std::string cgroups = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/cgroup"));
  for (absl::string_view line : absl::StrSplit(cgroups, '\n')) {
    const size_t slash = line.rfind('/');
    if (slash != absl::string_view::npos && ids.contains(line.substr(slash + 1))) return true;
  }
  return false;
}

// Mount points below `dir` in this mount namespace (the host's own view), deepest first.
std::vector<std::string> MountsBelow(const std::string& dir) {
  std::vector<std::string> found;
  const std::string prefix = dir + "/";
  for (absl::string_view line : absl::StrSplit(ReadFileOrEmpty("/proc/self/mountinfo"), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() > 4 && absl::StartsWith(f[4], prefix)) found.emplace_back(f[4]);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return found;
}

// Removes a cgroup directory; one that still holds processes is emptied first (cgroup.kill on v2).
bool RemoveCgroup(const std::string& dir) {
  for (int round = 0; round < 50; ++round) {
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY) return false;
    std::ofstream(dir + "/cgroup.kill") << "1";
    usleep(20'000);
  }
  return false;
}

// The other processes with `path` open ("pid 12 (name, state S, parent 1)"), to say who holds a lock on it.
std::string HoldersOf(const std::string& path) {
  struct stat want {};
  if (stat(path.c_str(), &want) != 0) return "";
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.empty() || !absl::c_all_of(pid, [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (pid == std::to_string(getpid())) continue;  // the one asking
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(proc.path() / "fd", fd_ec)) {
      struct stat got {};
      if (stat(fd.path().c_str(), &got) != 0 || got.st_dev != want.st_dev || got.st_ino != want.st_ino) continue;
      std::string name = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/comm"));
      if (!name.empty() && name.back() == '\n') name.pop_back();
      const std::string status = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/status"));
      auto field = [&](absl::string_view key) {
        for (absl::string_view line : absl::StrSplit(status, '\n')) {
          if (absl::ConsumePrefix(&line, key)) return std::string(absl::StripAsciiWhitespace(line));
        }
        return std::string("?");
      };
      found.push_back(
          absl::StrCat("pid ", pid, " (", name, ", state ", field("State:"), ", parent ", field("PPid:"), ")"));
      break;
    }
  }
  return absl::StrJoin(found, ", ");
}

}  // namespace

absl::StatusOr<UniqueFd> LockHostRoot(const std::string& root, absl::Duration wait) {
  std::error_code ec;
  fs::create_directories(root, ec);
  const std::string path = root + "/host.lock";
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  // A killed host's lock outlives it while a process it was starting still holds a copy of its descriptors
  // (execve tears the host's memory down before it closes them): that is over within a moment.
  const absl::Time give_up = ProcessNow() + wait;
  for (bool told = false; flock(fd.get(), LOCK_EX | LOCK_NB) != 0;) {
    const int err = errno;
    const std::string holders = HoldersOf(path);
    if (err != EWOULDBLOCK || ProcessNow() >= give_up) {
      return absl::FailedPreconditionError(
          absl::StrCat("another corral-sandbox-host is using the root ", root, " (", path, " is locked",
                       holders.empty() ? "" : absl::StrCat(", open in ", holders), "); give each host its own root"));
    }
    if (!told) spdlog::info("waiting for {} (open in {})", path, holders.empty() ? "?" : holders);
    told = true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return fd;
}

Leftovers RemoveLeftovers(const std::string& root, uid_t uid_first, uid_t uid_last,
                          const std::vector<std::string>& cgroup_parents) {
  Leftovers out;
  const fs::path homes = fs::path(root) / "homes";
  absl::flat_hash_set<std::string> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(homes, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "sb-")) {
      ids.insert(name);
      out.sandboxes.push_back(name);
    }
  }
  std::sort(out.sandboxes.begin(), out.sandboxes.end());

  // Processes first: nothing of a sandbox may run while its home and cgroup go. A uid one of them ran as is
  // swept whole (kill(-1) as that uid), which also catches what escaped with setsid or double forks.
  absl::flat_hash_set<uid_t> theirs, others;
  auto in_pool = [&](uid_t id) {
    const uid_t u = SubIdOwner(id);  // a block's id is its pool uid's
    return u >= uid_first && u <= uid_last;
  };
  ForEachLiveProcess(
      [&](pid_t pid, const std::vector<uid_t>& uids) {
        for (uid_t id : uids) {
          if (!in_pool(id)) continue;
          (!ids.empty() && BelongsTo(pid, ids) ? theirs : others).insert(SubIdOwner(id));
          return;
        }
      },
      in_pool);
  for (uid_t u : theirs) {
    size_t found = 0;
    const bool clean = KillAllOf(u, 20, &found);
    out.processes_killed += found;
    if (!clean) {
      out.busy_uids.insert(u);
      out.errors.push_back(absl::StrCat("uid ", u, " still runs processes after the sweep"));
    }
  }
  // Processes of pool uids that name none of our sandboxes: not ours to kill (another host sharing the range,
  // or a process that hid where it came from); their uids are not handed out.
  for (uid_t u : others) {
    if (!theirs.contains(u) && !ProcessesOf(u).empty()) out.busy_uids.insert(u);
  }

  for (const std::string& mount : MountsBelow(homes.string())) {
    if (umount2(mount.c_str(), MNT_DETACH) == 0) {
      ++out.mounts_detached;
    } else {
      out.errors.push_back(absl::StrCat("cannot unmount ", mount, ": ", strerror(errno)));
    }
  }
  for (const std::string& parent : cgroup_parents) {
    for (const std::string& id : out.sandboxes) {
      const std::string dir = parent + "/" + id;
      if (!fs::exists(dir, ec)) continue;
      if (RemoveCgroup(dir)) {
        ++out.cgroups_removed;
      } else {
        out.errors.push_back(absl::StrCat("cannot remove cgroup ", dir, ": ", strerror(errno)));
      }
    }
  }
  for (const std::string& id : out.sandboxes) {
    fs::remove_all(homes / id, ec);
    if (ec) {
      out.errors.push_back(absl::StrCat("cannot remove ", (homes / id).string(), ": ", ec.message()));
    } else {
      ++out.homes_removed;
    }
  }
  return out;
}

}  // namespace corral::sandbox
