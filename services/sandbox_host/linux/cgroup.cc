#include "services/sandbox_host/linux/cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;

bool WriteFile(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  close(fd);
  return ok;
}

bool Writable(const std::string& dir) { return access(dir.c_str(), W_OK) == 0; }

std::string ReadAll(const char* path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<CgroupMount> ParseCgroupMounts(const std::string& mountinfo) {
  // "36 25 0:31 /root /mount/point rw,relatime shared:1 - cgroup cgroup rw,memory": optional fields end at "-".
  std::vector<CgroupMount> mounts;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;  // garbage: skip the line
    const absl::string_view fstype = *(dash + 1);
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m{std::string(f[3]), std::string(f[4]), std::string(fstype), {}};
    for (absl::string_view o : absl::StrSplit(*(dash + 3), ',')) m.options.emplace_back(o);
    mounts.push_back(std::move(m));
  }
  return mounts;
}

std::vector<OwnCgroup> ParseOwnCgroups(const std::string& proc_self_cgroup) {
  // "4:memory:/path", "1:cpu,cpuacct:/path", "0::/path" (v2).
  std::vector<OwnCgroup> own;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3 || f[2].empty() || f[2][0] != '/') continue;
    OwnCgroup c{f[0], absl::StrSplit(f[1], ',', absl::SkipEmpty()), f[2]};
    own.push_back(std::move(c));
  }
  return own;
}

std::string OwnCgroupDir(const std::vector<CgroupMount>& mounts, const std::vector<OwnCgroup>& own,
                         const std::string& controller) {
  const bool v2 = controller.empty();
  auto line = std::find_if(own.begin(), own.end(), [&](const OwnCgroup& c) {
    return v2 ? c.hierarchy == "0" : Contains(c.controllers, controller);
  });
  if (line == own.end()) return "";
  for (const CgroupMount& m : mounts) {
    if (v2 ? m.fstype != "cgroup2" : (m.fstype != "cgroup" || !Contains(m.options, controller))) continue;
    // The mount shows the cgroup `m.root` at its mount point; ours must be that one or below it.
    const std::string& root = m.root;
    absl::string_view below = line->path;
    if (root != "/") {
      if (!absl::ConsumePrefix(&below, root) || (!below.empty() && below[0] != '/')) continue;
    }
    const std::string dir = absl::StrCat(m.mount_point, below == "/" ? "" : below);
    if (fs::is_directory(dir)) return dir;
  }
  return "";
}

std::vector<int> SandboxCgroup::procs_fds() const {
  std::vector<int> fds;
  for (const auto& fd : procs_) fds.push_back(fd.get());
  return fds;
}

CgroupUsage ParseCgroupUsage(const CgroupFiles& files) {
  CgroupUsage u;
  for (absl::string_view line : absl::StrSplit(files.cpu_stat, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t v = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &v)) continue;
    if (kv[0] == "usage_usec") u.cpu_usec = v;
    if (kv[0] == "user_usec") u.cpu_user_usec = v;
    if (kv[0] == "system_usec") u.cpu_system_usec = v;
  }
  auto number = [](const std::string& text, int64_t& out) {
    int64_t v = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) && v >= 0) out = v;
  };
  number(files.memory_current, u.memory_bytes);
  number(files.memory_peak, u.memory_peak_bytes);
  number(files.pids_current, u.pids);
  if (absl::StripAsciiWhitespace(files.memory_max) == "max") {
    u.memory_limit_bytes = 0;
  } else {
    number(files.memory_max, u.memory_limit_bytes);
  }
  // One line per device: "8:0 rbytes=1 wbytes=2 rios=1 wios=1 dbytes=0 dios=0".
  if (files.io_stat) {
    u.io_write_bytes = 0;
    for (absl::string_view line : absl::StrSplit(*files.io_stat, '\n', absl::SkipEmpty())) {
      for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
        int64_t v = 0;
        if (absl::ConsumePrefix(&field, "wbytes=") && absl::SimpleAtoi(field, &v) && v >= 0) u.io_write_bytes += v;
      }
    }
  }
  return u;
}

std::string SandboxCgroup::FileIn(const char* name) const {
  for (const std::string& dir : dirs_) {
    std::string path = dir + "/" + name;
    if (access(path.c_str(), F_OK) == 0) return path;
  }
  return "";
}

void SandboxCgroup::OpenUsageFiles() {
  // v1: cpuacct.usage is nanoseconds, cpuacct.stat clock ticks (v2's cpu.stat has both); v1 counts no disk writes.
  static constexpr std::array<const char*, kUsageFiles> kV1 = {
      "cpuacct.usage", "cpuacct.stat", "memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.limit_in_bytes",
      "pids.current",  nullptr};
  static constexpr std::array<const char*, kUsageFiles> kV2 = {
      "cpu.stat", nullptr, "memory.current", "memory.peak", "memory.max", "pids.current", "io.stat"};
  for (int f = 0; f < kUsageFiles; ++f) {
    const char* name = (v2_ ? kV2 : kV1)[f];
    if (name == nullptr) continue;
    for (const std::string& dir : dirs_) {
      usage_files_[f] = UniqueFd(open((dir + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
      if (usage_files_[f].valid()) break;
    }
  }
}

std::optional<std::string> SandboxCgroup::Read(UsageFile file) const {
  const UniqueFd& fd = usage_files_[file];
  if (!fd.valid()) return std::nullopt;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = pread(fd.get(), buf, sizeof buf, static_cast<off_t>(text.size()))) > 0;) {
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

int64_t SandboxCgroup::MemoryBytes() const {
  int64_t v = -1;
  const std::optional<std::string> text = Read(kMemory);
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v) || v < 0) return -1;
  return v;
}

CgroupUsage SandboxCgroup::Usage() const {
  auto read = [&](UsageFile file) { return Read(file).value_or(""); };
  CgroupFiles f;
  f.pids_current = read(kPids);
  f.memory_current = read(kMemory);
  f.memory_peak = read(kMemoryPeak);
  f.memory_max = read(kMemoryMax);
  if (v2_) {
    f.cpu_stat = read(kCpu);
    f.io_stat = Read(kIo);
    return ParseCgroupUsage(f);
  }
  // v1: microseconds and ticks into cpu.stat's form; an unlimited memory.limit_in_bytes is a huge number.
  int64_t ns = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(read(kCpu)), &ns)) {
    absl::StrAppend(&f.cpu_stat, "usage_usec ", ns / 1000, "\n");
  }
  const int64_t tick_usec = 1000000 / std::max<long>(sysconf(_SC_CLK_TCK), 1);
  for (absl::string_view line : absl::StrSplit(read(kCpuTimes), '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t ticks = 0;
    if (kv.size() == 2 && absl::SimpleAtoi(kv[1], &ticks)) {
      absl::StrAppend(&f.cpu_stat, kv[0] == "user" ? "user_usec " : "system_usec ", ticks * tick_usec, "\n");
    }
  }
  int64_t bytes = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(f.memory_max), &bytes) && bytes >= (int64_t{1} << 62)) {
    f.memory_max = "max";
  }
  return ParseCgroupUsage(f);
}

absl::Status SandboxCgroup::Freeze(bool frozen, int timeout_ms) const {
  if (v2_ && !dirs_.empty()) return FreezeV2(frozen, timeout_ms);
  const std::string state = FileIn("freezer.state");
  if (state.empty()) {
    return absl::FailedPreconditionError(
        "pausing needs the sandbox in a cgroup with a freezer (cgroup v2, or v1's freezer); this host has none");
  }
  if (!WriteFile(state, frozen ? "FROZEN" : "THAWED")) {
    return absl::InternalError(absl::StrCat("cgroup: cannot write ", state, ": ", strerror(errno)));
  }
  // v1 reports FREEZING until every task stopped, and sends no event: read it again every millisecond.
  const std::string want = frozen ? "FROZEN" : "THAWED";
  for (int waited = 0; waited <= timeout_ms; ++waited) {
    if (absl::StripAsciiWhitespace(ReadAll(state.c_str())) == want) return absl::OkStatus();
    usleep(1000);
  }
  return absl::DeadlineExceededError(absl::StrCat(state, " did not read ", want, " within ", timeout_ms, " ms"));
}

absl::Status SandboxCgroup::FreezeV2(bool frozen, int timeout_ms) const {
  const std::string& d = dirs_[0];
  UniqueFd events(open((d + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
  if (!events.valid() || !WriteFile(d + "/cgroup.freeze", frozen ? "1" : "0")) {
    return absl::InternalError(absl::StrCat("cgroup: cannot ", frozen ? "freeze " : "thaw ", d, ": ", strerror(errno)));
  }
  // cgroup.events says "frozen 1" once every process stopped (a modification wakes poll with POLLPRI).
  const std::string want = frozen ? "frozen 1" : "frozen 0";
  for (int waited = 0;;) {
    char buf[256];
    const ssize_t n = pread(events.get(), buf, sizeof buf - 1, 0);
    if (n > 0 && absl::StrContains(absl::string_view(buf, static_cast<size_t>(n)), want)) return absl::OkStatus();
    if (waited >= timeout_ms) break;
    pollfd p{events.get(), POLLPRI, 0};
    const int step = std::min(100, timeout_ms - waited);  // a missed wakeup costs at most a step
    poll(&p, 1, step);
    waited += step;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("cgroup ", d, " did not ", frozen ? "freeze" : "thaw", " within ", timeout_ms, " ms"));
}

absl::Status SandboxCgroup::Remove() {
  procs_.clear();
  usage_files_ = {};
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
  const auto mounts = ParseCgroupMounts(ReadAll("/proc/self/mountinfo"));
  const auto own = ParseOwnCgroups(ReadAll("/proc/self/cgroup"));
  // cgroup v2: our own cgroup in the unified hierarchy is writable (delegated to us).
  if (const std::string own_dir = OwnCgroupDir(mounts, own, ""); !own_dir.empty() && Writable(own_dir)) {
    // No process may live in a cgroup whose controllers are delegated: move the host into a leaf first.
    const std::string host_leaf = own_dir + "/" + name + "-host";
    const std::string parent = own_dir + "/" + name;
    mkdir(host_leaf.c_str(), 0755);
    if (WriteFile(host_leaf + "/cgroup.procs", std::to_string(getpid()))) {
      mkdir(parent.c_str(), 0755);
      std::vector<std::string> enabled;
      for (const char* c : {"memory", "pids", "cpu", "io"}) {
        if (WriteFile(own_dir + "/cgroup.subtree_control", absl::StrCat("+", c)) &&
            WriteFile(parent + "/cgroup.subtree_control", absl::StrCat("+", c)) && c != std::string("io")) {
          enabled.push_back(c);  // io limits nothing here: it only counts the sandbox's disk writes (io.stat)
        }
      }
      if (!enabled.empty()) {
        m.mode_ = CgroupMode::kV2;
        m.controllers_ = enabled;
        m.parents_ = {parent};
        return m;
      }
    }
  }
  // cgroup v1: one hierarchy per controller; create beneath our own cgroup in each where that is writable
  // (cpuacct counts CPU time and freezer pauses; a hierarchy holding several controllers is used once).
  for (const char* controller : {"memory", "pids", "cpu", "cpuacct", "freezer"}) {
    const std::string own_dir = OwnCgroupDir(mounts, own, controller);
    if (own_dir.empty()) continue;
    const std::string parent = own_dir + "/" + name;
    if (Contains(m.parents_, parent)) continue;
    mkdir(parent.c_str(), 0755);
    if (Writable(parent)) {
      m.controllers_.push_back(controller);
      m.parents_.push_back(parent);
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
  cg.v2_ = mode_ == CgroupMode::kV2;
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
        value =
            std::to_string(mode_ == CgroupMode::kV2 ? limits.cpu_weight
                                                    : std::max<uint64_t>(2, uint64_t{limits.cpu_weight} * 1024 / 100));
      }
      if (!file.empty() && !WriteFile(dir + "/" + file, value)) return fail("write " + dir + "/" + file);
    }
    int fd = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail("open " + dir + "/cgroup.procs");
    cg.procs_.emplace_back(fd);
  }
  cg.OpenUsageFiles();
  return cg;
}

}  // namespace corral::sandbox
