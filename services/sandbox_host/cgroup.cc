#include "services/sandbox_host/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
constexpr char kRoot[] = "/sys/fs/cgroup";

bool WriteFile(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  close(fd);
  return ok;
}

bool Writable(const std::string& dir) { return access(dir.c_str(), W_OK) == 0; }

// /proc/self/cgroup: "hierarchy-id:controller,list:/path".
std::vector<std::vector<std::string>> SelfCgroups() {
  std::vector<std::vector<std::string>> lines;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() == 3) lines.push_back(std::move(f));
  }
  return lines;
}

}  // namespace

std::vector<int> SandboxCgroup::procs_fds() const {
  std::vector<int> fds;
  for (const auto& fd : procs_) fds.push_back(fd.get());
  return fds;
}

absl::Status SandboxCgroup::Remove() {
  procs_.clear();
  for (const auto& dir : dirs_) {
    if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat("cannot remove cgroup ", dir, ": ", strerror(errno)));
    }
  }
  dirs_.clear();
  return absl::OkStatus();
}

CgroupManager CgroupManager::Detect(const std::string& name) {
  CgroupManager m;
  const auto self = SelfCgroups();
  // cgroup v2: the unified hierarchy is mounted at the root and our own cgroup is writable (delegated).
  if (fs::exists(absl::StrCat(kRoot, "/cgroup.controllers"))) {
    for (const auto& f : self) {
      if (f[0] != "0") continue;
      const std::string own = absl::StrCat(kRoot, f[2]);
      // No process may live in a cgroup whose controllers are delegated: move the host into a leaf first.
      const std::string host_leaf = own + "/" + name + "-host";
      const std::string parent = own + "/" + name;
      if (!Writable(own)) break;
      mkdir(host_leaf.c_str(), 0755);
      if (!WriteFile(host_leaf + "/cgroup.procs", std::to_string(getpid()))) break;
      mkdir(parent.c_str(), 0755);
      std::vector<std::string> enabled;
      for (const char* c : {"memory", "pids", "cpu"}) {
        if (WriteFile(own + "/cgroup.subtree_control", absl::StrCat("+", c)) &&
            WriteFile(parent + "/cgroup.subtree_control", absl::StrCat("+", c))) {
          enabled.push_back(c);
        }
      }
      if (enabled.empty()) break;
      m.mode_ = CgroupMode::kV2;
      m.controllers_ = enabled;
      m.parents_ = {parent};
      return m;
    }
  }
  // cgroup v1: one hierarchy per controller; create beneath our own cgroup in each.
  for (const char* controller : {"memory", "pids", "cpu"}) {
    for (const auto& f : self) {
      std::vector<std::string> names = absl::StrSplit(f[1], ',');
      if (std::find(names.begin(), names.end(), controller) == names.end()) continue;
      std::string mount = absl::StrCat(kRoot, "/", f[1]);
      if (!fs::exists(mount)) mount = absl::StrCat(kRoot, "/", controller);
      const std::string parent = absl::StrCat(mount, f[2] == "/" ? "" : f[2], "/", name);
      mkdir(parent.c_str(), 0755);
      if (Writable(parent)) {
        m.controllers_.push_back(controller);
        m.parents_.push_back(parent);
      }
      break;
    }
  }
  if (!m.controllers_.empty()) m.mode_ = CgroupMode::kV1;
  return m;
}

std::string CgroupManager::Describe() const {
  if (mode_ == CgroupMode::kNone) return "none (rlimits only)";
  return absl::StrCat(mode_ == CgroupMode::kV2 ? "v2" : "v1", " ", absl::StrJoin(controllers_, ","), " beneath ",
                      absl::StrJoin(parents_, ", "));
}

absl::StatusOr<SandboxCgroup> CgroupManager::Create(const std::string& sandbox_id, const CgroupLimits& limits) const {
  SandboxCgroup cg;
  if (mode_ == CgroupMode::kNone) return cg;
  auto fail = [&](const std::string& what) -> absl::Status {
    absl::Status s = absl::FailedPreconditionError(absl::StrCat("cgroup: cannot ", what, ": ", strerror(errno)));
    (void)cg.Remove();
    return s;
  };
  for (size_t i = 0; i < parents_.size(); ++i) {
    const std::string dir = parents_[i] + "/" + sandbox_id;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return fail("create " + dir);
    cg.dirs_.push_back(dir);
    const std::vector<std::string> controllers =
        mode_ == CgroupMode::kV2 ? controllers_ : std::vector<std::string>{controllers_[i]};
    for (const std::string& c : controllers) {
      std::string file, value;
      if (c == "memory" && limits.memory_bytes > 0) {
        file = mode_ == CgroupMode::kV2 ? "memory.max" : "memory.limit_in_bytes";
        value = std::to_string(limits.memory_bytes);
      } else if (c == "pids" && limits.max_pids > 0) {
        file = "pids.max";
        value = std::to_string(limits.max_pids);
      } else if (c == "cpu" && limits.cpu_weight > 0) {
        file = mode_ == CgroupMode::kV2 ? "cpu.weight" : "cpu.shares";
        value = std::to_string(mode_ == CgroupMode::kV2 ? limits.cpu_weight
                                                        : std::max<uint64_t>(2, uint64_t{limits.cpu_weight} * 1024 / 100));
      }
      if (!file.empty() && !WriteFile(dir + "/" + file, value)) return fail("write " + dir + "/" + file);
    }
    int fd = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail("open " + dir + "/cgroup.procs");
    cg.procs_.emplace_back(fd);
  }
  return cg;
}

}  // namespace corral::sandbox
