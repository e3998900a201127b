#include "services/sandbox_host/sandbox_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "libs/api/ids.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "openssl/rand.h"
#include "services/sandbox_host/linux/containment.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMaxTaskPaths = 8;
constexpr size_t kMaxPorts = 16;

const char* const kSystemDirs[] = {"/proc",  "/sys",   "/dev",    "/etc",  "/usr", "/bin", "/sbin", "/lib",
                                   "/lib32", "/lib64", "/libx32", "/boot", "/run", "/var", "/tmp"};

std::string NewSandboxId() {
  unsigned char raw[8];
  RAND_bytes(raw, sizeof(raw));
  return "sb-" + absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(raw), sizeof(raw)));
}

absl::Status ValidateTaskPath(const std::string& p) {
  if (p.size() < 2 || p[0] != '/' || p.back() == '/' || p.find("//") != std::string::npos ||
      p.find("/.") != std::string::npos || p.find('\0') != std::string::npos || p.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("task path '", p, "' must be a normalized absolute path like /workspace"));
  }
  for (const char* dir : kSystemDirs) {
    if (p == dir || absl::StartsWith(p, absl::StrCat(dir, "/"))) {
      return absl::InvalidArgumentError(absl::StrCat("task path '", p, "' is a system directory"));
    }
  }
  return absl::OkStatus();
}

absl::Status Within(const char* name, uint64_t value, uint64_t ceiling) {
  if (ceiling > 0 && value > ceiling) {
    return absl::InvalidArgumentError(absl::StrCat(name, " ", value, " is above the host's ceiling of ", ceiling));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSandboxesCanReach(const std::string& root) {
  fs::path dir;
  for (const fs::path& part : fs::absolute(root)) {
    dir /= part;
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("sandbox root ", dir.string(), ": ", strerror(errno)));
    }
    if ((st.st_mode & S_IXOTH) == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s (mode %04o) does not let the sandboxes' uids reach their homes below %s: chmod o+x it, or set "
          "root elsewhere",
          dir.string(), st.st_mode & 07777, root));
    }
  }
  return absl::OkStatus();
}

namespace {

// uids the pool never hands out: those of the machine's users (/etc/passwd) and `busy` ones.
// (Copied out of the StatusOr, not moved: GCC 12 mistakes the moved-from set's destructor for a bad free.)
absl::flat_hash_set<uid_t> ReservedUids(const absl::flat_hash_set<uid_t>& busy) {
  absl::flat_hash_set<uid_t> reserved(busy.begin(), busy.end());
  const absl::StatusOr<absl::flat_hash_set<uid_t>> users = ReadPasswdUids();
  if (users.ok()) reserved.insert(users->begin(), users->end());
  return reserved;
}

}  // namespace

SandboxManager::SandboxManager(HostOptions options, HostFeatures features, Clock* clock, const TokenSigner* signer,
                               SandboxManagerParts parts)
    : options_(std::move(options)),
      features_(features),
      clock_(clock),
      signer_(signer),
      metrics_(parts.metrics),
      workers_(parts.workers),
      templates_(parts.templates),
      images_(parts.images),
      layers_(parts.layers),
      carrier_(parts.carrier),
      uids_(options_.uid_first, options_.uid_last, ReservedUids(options_.busy_uids)) {
  const StorageParts storage{.mount_namespaces = features_.mount_namespaces,
                             .images = images_,
                             .layers = layers_,
                             .metrics = metrics_,
                             .clock = clock_,
                             .carry = carrier_ != nullptr && layers_ != nullptr && features_.forks};
  storage_[static_cast<int>(StorageKind::kHome)] = NewHomeStorage(storage);
  storage_[static_cast<int>(StorageKind::kLayeredHome)] = NewLayeredHomeStorage(storage);
  storage_[static_cast<int>(StorageKind::kImageRoot)] = NewImageRootStorage(storage);
  std::error_code ec;
  fs::create_directories(fs::path(options_.root) / "homes", ec);
  fs::permissions(options_.root, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::replace, ec);
  if (metrics_) metrics_->capacity.Set(static_cast<double>(options_.capacity));
  absl::MutexLock lock(&mu_);
  evict_timer_ = clock_->RunAfter(absl::Seconds(1), [this] { EvictIdle(); });
}

SandboxManager::~SandboxManager() {
  std::map<std::string, std::shared_ptr<Sandbox>> all;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    clock_->Cancel(evict_timer_);
    all.swap(sandboxes_);
  }
  for (auto& [id, sandbox] : all) (void)Teardown(*sandbox);
}

int64_t SandboxManager::live() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(sandboxes_.size());
}

absl::Status SandboxManager::Normalize(SandboxSpec& spec) const {
  const NetworkPolicy net = spec.network.value_or(options_.default_network);
  spec.network = net;
  if (net == NetworkPolicy::kProxyOnly) {
    if (spec.allowed_ports.empty() || spec.allowed_ports.size() > kMaxPorts) {
      return absl::InvalidArgumentError("network proxy_only needs 1-16 allowed_ports");
    }
    for (uint16_t port : spec.allowed_ports) {
      if (port == 0) return absl::InvalidArgumentError("allowed_ports must be 1-65535");
    }
    if (features_.landlock_abi < 4) {
      return absl::FailedPreconditionError(
          absl::StrCat("network proxy_only needs Landlock ABI 4; this kernel has ", features_.landlock_abi));
    }
  } else if (!spec.allowed_ports.empty()) {
    return absl::InvalidArgumentError("allowed_ports are only for network proxy_only");
  }
  if (net == NetworkPolicy::kNone && !features_.mount_namespaces) {
    return absl::FailedPreconditionError("network none needs a network namespace, which this host cannot create");
  }
  if (!spec.image.empty()) {
    if (images_ == nullptr || !features_.images) {
      return absl::FailedPreconditionError(
          "this host cannot run sandboxes in images (it needs user namespaces and idmapped mounts: Linux 5.19+, "
          "CAP_SYS_ADMIN, an image store on ext4/xfs/btrfs/tmpfs)");
    }
  }
  if (spec.require_private_view && !features_.mount_namespaces) {
    return absl::FailedPreconditionError(
        "a private filesystem view needs mount namespaces, which this host cannot create");
  }
  CgroupLimits& cg = spec.cgroup;
  if (cg.memory_bytes == 0) cg.memory_bytes = options_.default_cgroup.memory_bytes;
  if (cg.max_pids == 0) cg.max_pids = options_.default_cgroup.max_pids;
  if (cg.cpu_weight == 0) cg.cpu_weight = options_.default_cgroup.cpu_weight;
  CORRAL_RETURN_IF_ERROR(Within("memory_bytes", cg.memory_bytes, options_.cgroup_ceiling.memory_bytes));
  CORRAL_RETURN_IF_ERROR(Within("max_pids", cg.max_pids, options_.cgroup_ceiling.max_pids));
  if (cg.cpu_weight > 10000) return absl::InvalidArgumentError("cpu_weight must be 1-10000");
  Rlimits& r = spec.rlimits;
  const Rlimits& d = options_.default_rlimits;
  if (r.nproc == 0) r.nproc = d.nproc;
  if (r.address_space_bytes == 0) r.address_space_bytes = d.address_space_bytes;
  if (r.nofile == 0) r.nofile = d.nofile;
  if (r.file_size_bytes == 0) r.file_size_bytes = d.file_size_bytes;
  if (r.cpu_seconds == 0) r.cpu_seconds = d.cpu_seconds;
  CORRAL_RETURN_IF_ERROR(ValidateRlimits(r, options_.rlimit_ceiling));
  if (spec.disk_bytes == 0) spec.disk_bytes = options_.default_disk_bytes;
  CORRAL_RETURN_IF_ERROR(Within("disk_bytes", spec.disk_bytes, options_.max_disk_bytes));
  size_t env_bytes = 0;
  for (const auto& [k, v] : spec.env) {
    if (!IsValidEnvName(k))
      return absl::InvalidArgumentError(absl::StrCat("env name '", k, "' is not [A-Za-z_][A-Za-z0-9_]*"));
    if (IsHostSetEnv(k)) return absl::InvalidArgumentError(absl::StrCat("env ", k, " is set by the host"));
    if (v.find('\0') != std::string::npos) return absl::InvalidArgumentError(absl::StrCat("env ", k, " contains NUL"));
    env_bytes += k.size() + v.size() + 2;
  }
  if (env_bytes > options_.max_env_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("env is ", env_bytes, " bytes; at most ", options_.max_env_bytes));
  }
  if (spec.task_paths.size() > kMaxTaskPaths) return absl::InvalidArgumentError("at most 8 task paths");
  for (const auto& p : spec.task_paths) CORRAL_RETURN_IF_ERROR(ValidateTaskPath(p));
  if (spec.idle_timeout == absl::ZeroDuration()) spec.idle_timeout = options_.default_idle_timeout;
  if (spec.idle_timeout < absl::ZeroDuration() || spec.idle_timeout > options_.max_idle_timeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("idle_timeout must be at most ", absl::FormatDuration(options_.max_idle_timeout)));
  }
  return ValidateLabels("labels", spec.labels);
}

absl::StatusOr<std::shared_ptr<Sandbox>> SandboxManager::Build(const SandboxSpec& spec, const Origin& origin) {
  const Sandbox* const previous = origin.previous;
  std::optional<uid_t> uid = previous != nullptr ? std::optional<uid_t>(previous->uid) : uids_.Acquire();
  if (!uid) return absl::ResourceExhaustedError("the uid pool is exhausted");
  auto sb = std::make_shared<Sandbox>();
  sb->id = previous != nullptr ? previous->id : NewSandboxId();
  sb->uid = *uid;
  sb->spec = spec;
  sb->dir = (fs::path(options_.root) / "homes" / sb->id).string();
  sb->home = sb->dir;
  sb->create_time = previous != nullptr ? previous->create_time : clock_->Now();
  sb->meter = previous != nullptr ? previous->meter : std::make_shared<UsageMeter>(sb->create_time);
  sb->storage = origin.kind();
  sb->forked_from = previous != nullptr ? previous->forked_from : origin.forked_from;
  sb->Touch(clock_->Now());
  auto fail = [&](absl::Status s) {
    // The parent's new generation owns nothing yet (its uid, cgroup and directory stay the parent's) but what
    // its files took.
    if (previous == nullptr) {
      (void)Teardown(*sb);
    } else {
      ReleaseFiles(*sb);
    }
    return s;
  };
  Protections& p = sb->protections;
  p.network = *spec.network;
  // The spec's values first: they win over the defaults (SpawnFor keeps a name's first value).
  for (const auto& [k, v] : spec.env) sb->base_env.push_back(absl::StrCat(k, "=", v));
  sb->base_env.push_back("CORRAL_SANDBOX_ID=" + sb->id);
  if (!options_.harness_root.empty()) sb->base_env.push_back("CORRAL_HARNESS_ROOT=" + options_.harness_root);
  Storage& files = StorageOf(sb->storage);
  if (absl::Status s = files.Build(*sb, origin); !s.ok()) return fail(s);
  std::vector<std::string> controllers;
  if (features_.cgroups != nullptr && features_.cgroups->mode() != CgroupMode::kNone) {
    if (previous == nullptr) {  // the parent's new generation takes the parent's cgroup once it is built
      auto cg = features_.cgroups->Create(sb->id, spec.cgroup);
      if (!cg.ok()) return fail(cg.status());
      sb->cgroup = *std::move(cg);
    }
    controllers = features_.cgroups->controllers();
  }
  // What no cgroup controller holds, an rlimit does (memory per process, processes per uid).
  const Containment held =
      PlanContainment(features_.cgroups != nullptr ? features_.cgroups->mode() : CgroupMode::kNone, controllers,
                      spec.cgroup, spec.rlimits, spec.image.empty() || spec.upper_on_disk ? 0 : spec.disk_bytes);
  sb->spec.rlimits = held.rlimits;
  p.cgroup = held.cgroup;
  p.cgroup_controllers = held.controllers;
  p.memory_rlimit_bytes = held.memory_rlimit_bytes;
  p.process_rlimit = held.process_rlimit;
  p.containment = held.summary;
  if (features_.landlock_abi > 0) {
    LandlockPolicy policy;
    files.Confine(*sb, policy);
    policy.network = *spec.network;
    policy.connect_ports = spec.allowed_ports;
    RulesetPlan plan = PlanRuleset(features_.landlock_abi, policy);
    auto ruleset = BuildRuleset(plan, policy);
    if (!ruleset.ok()) return fail(ruleset.status());
    sb->landlock = *std::move(ruleset);
    p.landlock_abi = plan.abi;
    p.tcp_bind_denied = (plan.handled_net & landlock::kNetBindTcp) != 0;
    p.scoped = plan.scoped != 0;
  }
  return sb;
}

int64_t SandboxManager::Reserve(int64_t count) {
  absl::MutexLock lock(&mu_);
  const int64_t free = options_.capacity - static_cast<int64_t>(sandboxes_.size()) - reserved_;
  const int64_t granted = std::max<int64_t>(0, std::min(count, free));
  reserved_ += granted;
  return granted;
}

absl::StatusOr<SandboxManager::CreateResult> SandboxManager::Create(int64_t count, SandboxSpec spec) {
  if (count < 1 || count > options_.max_create_count) {
    return absl::InvalidArgumentError(absl::StrCat("count must be 1-", options_.max_create_count));
  }
  CORRAL_RETURN_IF_ERROR(Normalize(spec));
  std::shared_ptr<const TemplateImage> tmpl;
  if (!spec.template_key.empty()) {
    if (templates_ == nullptr) return absl::NotFoundError("this host keeps no templates");
    CORRAL_ASSIGN_OR_RETURN(tmpl, templates_->Acquire(spec.template_key));
  }
  std::optional<Image> oci_image;
  if (!spec.image.empty()) {
    CORRAL_ASSIGN_OR_RETURN(oci_image, images_->Find(spec.image));
  }
  const std::string built_on = tmpl != nullptr ? tmpl->image_digest : "";
  if (tmpl != nullptr && built_on != (oci_image ? oci_image->digest : "")) {
    return absl::FailedPreconditionError(
        built_on.empty() ? absl::StrCat("template '", spec.template_key, "' is a home, not built on an image")
                         : absl::StrCat("template '", spec.template_key, "' was built on image ", built_on,
                                        oci_image ? absl::StrCat(", not ", oci_image->digest) : ", name it"));
  }
  const Origin origin{.tmpl = tmpl, .image = std::move(oci_image)};
  const int64_t granted = Reserve(count);
  CreateResult result;
  auto built = BuildMany(spec, origin, count, granted, result);
  absl::MutexLock lock(&mu_);
  reserved_ -= granted;
  if (!built.ok()) return built.status();
  Admit(*built, result);
  if (metrics_) metrics_->rejected.Increment(static_cast<double>(result.rejected));
  return result;
}

absl::StatusOr<std::vector<std::shared_ptr<Sandbox>>> SandboxManager::BuildMany(const SandboxSpec& spec,
                                                                                const Origin& origin, int64_t count,
                                                                                int64_t granted, CreateResult& result) {
  result.rejected = count - granted;
  if (result.rejected > 0) result.rejected_reason = "host capacity";
  std::vector<std::shared_ptr<Sandbox>> built;
  for (int64_t i = 0; i < granted; ++i) {
    auto sb = Build(spec, origin);
    if (sb.ok()) {
      built.push_back(*std::move(sb));
    } else if (absl::IsResourceExhausted(sb.status())) {
      result.rejected += granted - i;  // out of uids: the rest cannot be created either
      result.rejected_reason = "uid pool exhausted";
      break;
    } else {
      for (auto& b : built) (void)Teardown(*b);
      return sb.status();
    }
  }
  return built;
}

void SandboxManager::Admit(const std::vector<std::shared_ptr<Sandbox>>& built, CreateResult& result) {
  for (const auto& sb : built) {
    sandboxes_.emplace(sb->id, sb);
    result.created.push_back({sb, signer_->Sign(kSandboxTokenPurpose, sb->id)});
  }
  if (metrics_) {
    metrics_->created.Increment(static_cast<double>(built.size()));
    metrics_->live.Set(static_cast<double>(sandboxes_.size()));
  }
}

absl::StatusOr<std::shared_ptr<const Sandbox>> SandboxManager::Find(const std::string& id) {
  std::shared_ptr<Sandbox> due;
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("sandbox '", id, "' not found"));
      if (it->second->renewing) {  // another call builds its new generation: milliseconds
        fork_ended_.Wait(&mu_);
        continue;
      }
      if (it->second->forking) {
        return absl::UnavailableError(absl::StrCat("sandbox '", id, "' is being forked; try again in a moment"));
      }
      if (!it->second->renewal_due) {
        it->second->Touch(clock_->Now());
        return std::shared_ptr<const Sandbox>(it->second);
      }
      due = it->second;
      due->forking = due->renewing = true;
      break;
    }
  }
  CORRAL_RETURN_IF_ERROR(Renew(due));
  return Find(id);
}

int SandboxManager::EvictIdle() {
  std::vector<std::string> idle;
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return 0;
    for (const auto& [id, sb] : sandboxes_) {
      // Never while a process runs: a long silent command keeps its sandbox.
      if (sb->running == 0 && !sb->forking && !sb->paused &&
          now - absl::FromUnixNanos(sb->last_active_ns) > sb->spec.idle_timeout) {
        idle.push_back(id);
      }
    }
  }
  // The meters' readings, and teardowns (process sweep, home wipe), may take long: never on the clock's thread,
  // which runs every timer.
  if (options_.usage_readings && features_.cgroups != nullptr && features_.cgroups->mode() != CgroupMode::kNone) {
    std::vector<std::weak_ptr<const Sandbox>> all;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, sb] : sandboxes_) all.push_back(sb);
    }
    RunOn(workers_, [this, all = std::move(all)] { SampleUsage(all); });
  }
  for (const auto& id : idle) {
    RunOn(workers_, [this, id] {
      if (Delete(id)) {
        spdlog::info("sandbox {}: idle for its idle timeout; evicted", id);
        if (metrics_) metrics_->evictions.Increment();
      }
    });
  }
  absl::MutexLock lock(&mu_);
  if (!stopping_) evict_timer_ = clock_->RunAfter(absl::Seconds(1), [this] { EvictIdle(); });
  return static_cast<int>(idle.size());
}

std::vector<std::shared_ptr<const Sandbox>> SandboxManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const Sandbox>> out;
  for (const auto& [id, sb] : sandboxes_) out.push_back(sb);
  return out;
}

bool SandboxManager::Delete(const std::string& id, FinalUsage* final_usage) {
  return DeleteKeepingUpper(id, "", final_usage).code() != absl::StatusCode::kNotFound;
}

absl::Status SandboxManager::DeleteKeepingUpper(const std::string& id, const std::string& dest,
                                                FinalUsage* final_usage) {
  std::shared_ptr<Sandbox> sb;
  {
    absl::MutexLock lock(&mu_);
    // A fork takes milliseconds: the delete waits for it, and deletes the generation it leaves.
    auto it = sandboxes_.find(id);
    while (it != sandboxes_.end() && it->second->forking) {
      it->second->delete_requested.Wake();  // a fork still waiting for processes gives up
      fork_ended_.Wait(&mu_);
      it = sandboxes_.find(id);
    }
    if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("sandbox '", id, "' not found"));
    if (!dest.empty() && !it->second->in_image()) {
      return absl::FailedPreconditionError(absl::StrCat("sandbox '", id, "' has no image layer to keep"));
    }
    sb = std::move(it->second);
    sandboxes_.erase(it);
    if (metrics_) metrics_->live.Set(static_cast<double>(sandboxes_.size()));
  }
  absl::Status kept = Teardown(*sb, dest, final_usage);
  if (metrics_) {
    metrics_->deletes.Increment();
    metrics_->quarantined.Set(static_cast<double>(uids_.quarantined()));
  }
  return kept;
}

absl::Status SandboxManager::Teardown(Sandbox& sb, const std::string& keep_upper, FinalUsage* final_usage) {
  bool clean = false;
  {
    absl::MutexLock lock(&sb.uid_mu);
    sb.deleted = true;                             // executions that end now report SANDBOX_DELETED, and sweep no more
    if (sb.paused) (void)sb.cgroup.Freeze(false);  // a process frozen by cgroup v1 dies only once thawed
    // Every process of the uid dies first (setsid escapees included), so nothing can race the wipe.
    clean = KillAllOf(sb.uid);
    if (final_usage != nullptr) final_usage->usage = MeasureLocked(sb, final_usage->query);
  }
  sb.landlock.Reset();
  sb.namespaces = SandboxNamespaces{};
  if (absl::Status s = sb.cgroup.Remove(); !s.ok()) spdlog::warn("sandbox {}: {}", sb.id, s);
  sb.home_fd.Reset();  // an image root: its overlay goes with the last reference to its mount namespace
  ReleaseFiles(sb);
  sb.layers.reset();  // the last user of a layer removes it
  absl::Status kept;
  if (!keep_upper.empty() && (!clean || rename((sb.dir + "/rw/upper").c_str(), keep_upper.c_str()) != 0)) {
    kept = absl::InternalError(clean ? absl::StrCat("keeping the sandbox's layer: ", strerror(errno))
                                     : "the sandbox's processes could not all be killed; its layer is not kept");
  }
  std::error_code ec;
  if (!sb.dir.empty()) fs::remove_all(sb.dir, ec);  // never follows symlinks
  if (ec) spdlog::warn("sandbox {}: wiping {}: {}", sb.id, sb.dir, ec.message());
  if (!clean) spdlog::warn("sandbox {}: uid {} still has processes; quarantined", sb.id, sb.uid);
  uids_.Release(sb.uid, clean);
  return kept;
}

void SandboxManager::ReleaseFiles(Sandbox& sb) {
  StorageOf(sb.storage).Teardown(sb);
  if (sb.template_image) sb.template_image->sandboxes--;
  sb.template_image.reset();
}

absl::Status SandboxManager::CheckSandboxToken(const std::string& id, const std::string& token) const {
  auto payload = signer_->Verify(kSandboxTokenPurpose, token);
  if (!payload.ok()) return absl::UnauthenticatedError("invalid sandbox token");
  if (*payload != id) return absl::PermissionDeniedError("this token belongs to another sandbox");
  return absl::OkStatus();
}

}  // namespace corral::sandbox
