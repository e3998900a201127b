#include "services/sandbox_host/sandbox_host_root.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/fd_limit.h"
#include "libs/http/embedded_files.h"
#include "services/sandbox_host/images/image_root.h"
#include "services/sandbox_host/linux/containment.h"
#include "services/sandbox_host/linux/filesystem_note.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/reconcile.h"
#include "spdlog/spdlog.h"

extern const corral::http::EmbeddedFile kCarryScripts[];  // scripts/corral_carry.py

namespace corral::sandbox {
namespace {

void ReportLeftovers(const Leftovers& leftovers) {
  if (!leftovers.sandboxes.empty()) {
    spdlog::warn(
        "removed what a previous run left of {} sandbox(es) ({}{}): {} process(es) killed, {} cgroup(s), "
        "{} home(s), {} mount(s)",
        leftovers.sandboxes.size(),
        absl::StrJoin(leftovers.sandboxes.begin(),
                      leftovers.sandboxes.begin() + std::min<size_t>(leftovers.sandboxes.size(), 8), ", "),
        leftovers.sandboxes.size() > 8 ? ", …" : "", leftovers.processes_killed, leftovers.cgroups_removed,
        leftovers.homes_removed, leftovers.mounts_detached);
  }
  for (const std::string& error : leftovers.errors) spdlog::error("leftovers: {}", error);
  if (!leftovers.busy_uids.empty()) {
    spdlog::warn("{} uid(s) of the pool run processes that are not this host's; they are not handed out",
                 leftovers.busy_uids.size());
  }
}

// What the host offers, with the root's cgroup manager (Build detected it before the root, its owner, existed).
HostFeatures WithCgroups(HostFeatures features, const CgroupManager* cgroups) {
  features.cgroups = cgroups;
  return features;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SandboxHostRoot>> SandboxHostRoot::Build(Config config) {
  if (geteuid() != 0) {
    return absl::PermissionDeniedError("corral-sandbox-host must run as root (it switches to each sandbox's uid)");
  }
  HostFeatures features;
  features.landlock_abi = LandlockAbi();
  if (features.landlock_abi < config.min_landlock_abi) {
    if (!config.allow_unconfined) {
      return absl::FailedPreconditionError(
          absl::StrCat("Landlock ABI ", features.landlock_abi, " is below min_landlock_abi ", config.min_landlock_abi,
                       "; enable Landlock in the kernel (lsm=landlock,...) or pass --allow-unconfined"));
    }
    spdlog::warn("running without the required Landlock ABI ({} < {}): --allow-unconfined", features.landlock_abi,
                 config.min_landlock_abi);
  }
  // Each sandbox holds a few descriptors (home, namespaces, cgroup files, Landlock ruleset): raise the soft
  // limit to the hard one so a host full of sandboxes does not run out.
  RaiseOpenFileLimit();
  // Orphaned sandbox processes are re-parented to the host, which reaps them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  features.mount_namespaces = CanUseMountNamespaces();
  std::string host_id = EffectiveHostId(config);
  HostOptions host = EffectiveHostOptions(config);
  CgroupManager cgroups = CgroupManager::Detect("corral-" + host_id);
  // The root is this host's alone; what a killed run of it left there (sandboxes' processes, cgroups, homes) is
  // removed before anything is served.
  auto root_lock = LockHostRoot(host.root);
  if (!root_lock.ok()) return root_lock.status();
  const Leftovers leftovers = RemoveLeftovers(host.root, host.uid_first, host.uid_last, cgroups.parents());
  ReportLeftovers(leftovers);
  host.busy_uids = leftovers.busy_uids;
  std::filesystem::create_directories(host.root + "/images");
  std::filesystem::create_directories(host.root + "/homes");
  features.images = features.mount_namespaces && CanUseImages(host.root + "/images");
  // Forks mount their layers idmapped, as images do; the homes must be where layers can be idmapped too.
  features.forks = features.images && CanUseImages(host.root + "/homes");
  spdlog::info("isolation: landlock ABI {}, mount namespaces {}, images {}, forks {}", features.landlock_abi,
               features.mount_namespaces ? "yes" : "no (TMPDIR in the home; no private view)",
               features.images ? "yes" : "no (needs user namespaces and idmapped mounts)",
               features.forks ? "yes" : "no");
  spdlog::info("containment: {}", DescribeHostContainment(cgroups));
  if (const std::string note = SlowFilesystemNote(host.root); !note.empty()) spdlog::warn("{}", note);
  if (absl::Status reach = CheckSandboxesCanReach(host.root); !reach.ok()) return reach;

  auto secret = LoadClusterSecret(config.server);
  if (!secret.ok()) return secret.status();
  RegistryOptions registry;
  registry.ca_file = config.registry_ca_file;
  registry.insecure_registries = config.insecure_registries;
  registry.timeout = config.registry_timeout;
  if (!config.registry_auth_file.empty()) {
    auto credentials = LoadRegistryCredentials(config.registry_auth_file);
    if (!credentials.ok()) {
      return absl::Status(credentials.status().code(),
                          absl::StrCat("registry_auth_file: ", credentials.status().message()));
    }
    registry.credentials = *std::move(credentials);
  }
  return std::unique_ptr<SandboxHostRoot>(
      new SandboxHostRoot(std::move(config), Prepared{.host_id = std::move(host_id),
                                                      .host = std::move(host),
                                                      .features = features,
                                                      .cgroups = std::move(cgroups),
                                                      .root_lock = *std::move(root_lock),
                                                      .secret = *std::move(secret),
                                                      .registry = std::move(registry)}));
}

namespace {

// The host's Python module for fork-ready processes, written where their view shows it read-only.
std::unique_ptr<Carrier> MakeCarrier(const HostFeatures& features, const std::string& root) {
  if (!features.forks) return nullptr;
  const http::EmbeddedFile* script = http::FindEmbedded(kCarryScripts, "corral_carry.py");
  const std::string lib = root + "/lib";
  std::error_code ec;
  std::filesystem::create_directories(lib, ec);
  chmod(lib.c_str(), 0755);
  if (script == nullptr || !(std::ofstream(lib + "/corral_carry.py") << script->data)) {
    spdlog::warn("processes cannot be carried into forks here: corral_carry.py could not be written to {}", lib);
    return nullptr;
  }
  chmod((lib + "/corral_carry.py").c_str(), 0644);
  auto carrier = Carrier::Create(root + "/views", lib);
  if (!carrier.ok()) {
    spdlog::warn("{}", std::string(carrier.status().message()));
    return nullptr;
  }
  return *std::move(carrier);
}

}  // namespace

SandboxHostRoot::SandboxHostRoot(Config config, Prepared p)
    : config_(std::move(config)),
      host_id_(std::move(p.host_id)),
      cgroups_(std::move(p.cgroups)),
      root_lock_(std::move(p.root_lock)),
      secret_(std::move(p.secret)),
      auth_(MakeCallAuthenticator(config_.server, secret_)),
      runner_("sandbox-host", config_.server),
      metrics_(*runner_.registry()),
      templates_(p.host.root + "/templates", p.host.templates, &clock_, &metrics_),
      images_(p.host.root + "/images", LayerLimits{}, &clock_, static_cast<uint64_t>(config_.max_image_bytes)),
      layers_(p.host.root),
      carrier_(MakeCarrier(p.features, p.host.root)),
      sandboxes_(p.host, WithCgroups(p.features, &cgroups_), &clock_, &secret_,
                 SandboxManagerParts{.metrics = &metrics_,
                                     .layers = &layers_,
                                     .templates = &templates_,
                                     .images = &images_,
                                     .workers = &workers_,
                                     .carrier = carrier_.get()}),
      execs_(&clock_, &metrics_, &workers_, carrier_.get()),
      puller_(&images_, std::move(p.registry)),
      service_(&sandboxes_, &execs_, &templates_, &images_, &puller_, &auth_, &clock_, &workers_, &image_workers_,
               host_id_, config_.harness_root),
      empty_since_(clock_.Now()) {
  runner_.AddService(&service_, "corral.v1.SandboxHost");
}

void SandboxHostRoot::WatchEmpty() {
  if (sandboxes_.live() > 0) empty_since_ = clock_.Now();
  if (clock_.Now() - empty_since_ >= config_.exit_when_empty_for) {
    spdlog::info("no sandbox for {}; exiting (exit_when_empty_for)", absl::FormatDuration(config_.exit_when_empty_for));
    runner_.RequestShutdown();
    return;
  }
  clock_.RunAfter(absl::Milliseconds(250), [this] { WatchEmpty(); });
}

int SandboxHostRoot::Run() {
  if (auto s = runner_.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  // Optional: a host started for one job exits once it has held no sandbox for a while.
  if (config_.exit_when_empty_for > absl::ZeroDuration()) {
    empty_since_ = clock_.Now();
    clock_.RunAfter(absl::Milliseconds(250), [this] { WatchEmpty(); });
  }
  runner_.Wait();
  return 0;
}

SandboxHostRoot::~SandboxHostRoot() {
  clock_.Stop();      // no timer may fire into the managers while they shut down
  templates_.Stop();  // cancels builds in progress (killing their setup commands) and waits for them
  workers_.Stop();    // finishes queued teardowns and kills while the managers still exist
  // Then, as members go: the exec manager kills running executions; the sandbox manager kills every sandbox's
  // processes, wipes homes, frees cgroups and uids.
}

}  // namespace corral::sandbox
