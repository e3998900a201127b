// corral-sandbox-host: composition root. Checks what the host needs (root, Landlock, cgroups, namespaces),
// then builds in dependency order: clock → sandbox manager (uids, homes, isolation) → exec manager (processes)
// → gRPC adapter → server runner; runs until SIGTERM, then kills every sandbox's processes and wipes them.
#include <sys/prctl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "absl/strings/str_join.h"
#include "libs/core/clock.h"
#include "libs/core/fd_limit.h"
#include "libs/core/logging.h"
#include "libs/core/worker_pool.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_runner.h"
#include "services/sandbox_host/config.h"
#include "services/sandbox_host/containment.h"
#include "services/sandbox_host/exec_manager.h"
#include "services/sandbox_host/image_root.h"
#include "services/sandbox_host/reconcile.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "services/sandbox_host/sandbox_service.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();
  corral::sandbox::Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-sandbox-host",
          "Hundreds of isolated sandboxes on one machine: a uid, a private home, Landlock, rlimits, "
          "cgroups and private namespaces each.",
          "sandbox-host", config, corral::sandbox::RegisterConfig, corral::sandbox::ValidateConfig, argc, argv)) {
    return *exit_code;
  }

  // What the host needs, checked before anything is created.
  if (geteuid() != 0) {
    spdlog::error("cannot start: corral-sandbox-host must run as root (it switches to each sandbox's uid)");
    return 1;
  }
  corral::sandbox::HostFeatures features;
  features.landlock_abi = corral::sandbox::LandlockAbi();
  if (features.landlock_abi < config.min_landlock_abi) {
    if (!config.allow_unconfined) {
      spdlog::error(
          "cannot start: Landlock ABI {} is below min_landlock_abi {}; enable Landlock in the kernel "
          "(lsm=landlock,...) or pass --allow-unconfined",
          features.landlock_abi, config.min_landlock_abi);
      return 1;
    }
    spdlog::warn("running without the required Landlock ABI ({} < {}): --allow-unconfined", features.landlock_abi,
                 config.min_landlock_abi);
  }
  // Each sandbox holds a few descriptors (home, namespaces, cgroup files, Landlock ruleset): raise the soft
  // limit to the hard one so a host full of sandboxes does not run out.
  corral::RaiseOpenFileLimit();
  // Orphaned sandbox processes are re-parented to the host, which reaps them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  features.mount_namespaces = corral::sandbox::CanUseMountNamespaces();
  const std::string host_id = corral::sandbox::EffectiveHostId(config);
  corral::sandbox::HostOptions host = corral::sandbox::EffectiveHostOptions(config);
  const corral::sandbox::CgroupManager cgroups = corral::sandbox::CgroupManager::Detect("corral-" + host_id);
  // The root is this host's alone; what a killed run of it left there (sandboxes' processes, cgroups, homes) is
  // removed before anything is served.
  auto root_lock = corral::sandbox::LockHostRoot(host.root);
  if (!root_lock.ok()) {
    spdlog::error("cannot start: {}", root_lock.status().message());
    return 1;
  }
  const corral::sandbox::Leftovers leftovers =
      corral::sandbox::RemoveLeftovers(host.root, host.uid_first, host.uid_last, cgroups.parents());
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
  host.busy_uids = leftovers.busy_uids;
  features.cgroups = &cgroups;
  // OCI images: kept across restarts under the sandbox root (a volume in containers).
  std::filesystem::create_directories(host.root + "/images");
  features.images = features.mount_namespaces && corral::sandbox::CanUseImages(host.root + "/images");
  spdlog::info("isolation: landlock ABI {}, mount namespaces {}, images {}", features.landlock_abi,
               features.mount_namespaces ? "yes" : "no (TMPDIR in the home; no private view)",
               features.images ? "yes" : "no (needs user namespaces and idmapped mounts)");
  spdlog::info("containment: {}", corral::sandbox::DescribeHostContainment(cgroups));

  auto secret = corral::LoadClusterSecret(config.server);
  if (!secret.ok()) {
    spdlog::error("cannot start: {}", secret.status());
    return 1;
  }
  const corral::CallAuthenticator auth = corral::MakeCallAuthenticator(config.server, *secret);
  corral::RealClock clock;
  corral::ServerRunner runner("sandbox-host", config.server);
  corral::sandbox::SandboxHostMetrics metrics(*runner.registry());
  auto sandboxes = std::make_unique<corral::sandbox::SandboxManager>(host, features, &clock, &*secret, &metrics);
  auto execs = std::make_unique<corral::sandbox::ExecManager>(&clock, &metrics);
  auto templates =
      std::make_unique<corral::sandbox::TemplateStore>(host.root + "/templates", host.templates, &clock, &metrics);
  sandboxes->SetTemplates(templates.get());
  auto images = std::make_unique<corral::sandbox::ImageStore>(host.root + "/images", corral::sandbox::LayerLimits{},
                                                              &clock, static_cast<uint64_t>(config.max_image_bytes));
  sandboxes->SetImages(images.get());
  if (auto reach = corral::sandbox::CheckSandboxesCanReach(host.root); !reach.ok()) {
    spdlog::error("cannot start: {}", reach.message());
    return 1;
  }
  // Creates, deletes, evictions and kill sweeps run here, never on a gRPC or the clock's thread; they mostly
  // wait on the kernel (sweeps, wipes, copies), so a few threads beyond the cores.
  auto workers = std::make_unique<corral::WorkerPool>(4);
  sandboxes->SetWorkers(workers.get());
  execs->SetWorkers(workers.get());
  // Imports and pulls (a large image takes minutes) on their own threads, so creates never wait behind them.
  auto image_workers = std::make_unique<corral::WorkerPool>(2);
  corral::sandbox::RegistryOptions registry;
  registry.ca_file = config.registry_ca_file;
  registry.insecure_registries = config.insecure_registries;
  registry.timeout = config.registry_timeout;
  if (!config.registry_auth_file.empty()) {
    auto credentials = corral::sandbox::LoadRegistryCredentials(config.registry_auth_file);
    if (!credentials.ok()) {
      spdlog::error("cannot start: registry_auth_file: {}", credentials.status().message());
      return 1;
    }
    registry.credentials = *std::move(credentials);
  }
  corral::sandbox::ImagePuller puller(images.get(), std::move(registry));
  corral::sandbox::SandboxService service(sandboxes.get(), execs.get(), templates.get(), images.get(), &puller, &auth,
                                          &clock, workers.get(), image_workers.get(), host_id);
  runner.AddService(&service, "corral.v1.SandboxHost");
  if (auto s = runner.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    return 1;
  }
  // Optional: a host started for one job exits once it has held no sandbox for a while.
  std::function<void()> watch_empty;
  absl::Time empty_since = clock.Now();
  watch_empty = [&] {
    if (sandboxes->live() > 0) empty_since = clock.Now();
    if (clock.Now() - empty_since >= config.exit_when_empty_for) {
      spdlog::info("no sandbox for {}; exiting (exit_when_empty_for)",
                   absl::FormatDuration(config.exit_when_empty_for));
      runner.RequestShutdown();
      return;
    }
    clock.RunAfter(absl::Milliseconds(250), [&] { watch_empty(); });
  };
  if (config.exit_when_empty_for > absl::ZeroDuration())
    clock.RunAfter(absl::Milliseconds(250), [&] { watch_empty(); });
  runner.Wait();
  clock.Stop();       // no timer may fire into the managers while they shut down
  templates.reset();  // cancels builds in progress (killing their setup commands) and waits for them
  workers.reset();    // finishes queued teardowns and kills while the managers still exist
  execs.reset();      // kills running executions
  sandboxes.reset();  // kills every sandbox's processes, wipes homes, frees cgroups and uids
  spdlog::info("sandbox-host: all sandboxes removed");
  return 0;
}
