// corral-sandbox-host's composition root: every part as a member, declared in the order they depend on each
// other — what the host was found to offer (Landlock, cgroups, namespaces, images) and its root's lock → clock,
// server runner and metrics → template and image stores → worker pools → sandbox manager (uids, homes,
// isolation) → exec manager (processes) → image puller → gRPC adapter. At shutdown: builds cancelled, queued
// teardowns finished, then every sandbox's processes killed and its home wiped.
//
// Threads: gRPC's callback threads (adapters), the clock's timer thread, the exec manager's epoll thread, four
// workers (creates, deletes, sweeps) and two image workers (imports, pulls) (docs/threading.md).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "libs/core/clock.h"
#include "libs/core/unique_fd.h"
#include "libs/core/worker_pool.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_config.h"
#include "libs/rpc/server_runner.h"
#include "services/sandbox_host/config.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/images/image_pull.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/metrics.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "services/sandbox_host/sandbox_service.h"
#include "services/sandbox_host/template_store.h"

namespace corral::sandbox {

class SandboxHostRoot {
 public:
  // Checks what the host needs (root, Landlock, cgroups, namespaces) and removes what a killed run left on its
  // root, before anything is created; loads the secret and registry credentials.
  static absl::StatusOr<std::unique_ptr<SandboxHostRoot>> Build(Config config);
  ~SandboxHostRoot();
  SandboxHostRoot(const SandboxHostRoot&) = delete;
  SandboxHostRoot& operator=(const SandboxHostRoot&) = delete;

  // Serves until SIGTERM/SIGINT (or exit_when_empty_for). Returns the process's exit code.
  int Run();

 private:
  struct Prepared {
    std::string host_id;
    HostOptions host;
    HostFeatures features;  // cgroups: the root's member
    CgroupManager cgroups;
    UniqueFd root_lock;
    TokenSigner secret;
    RegistryOptions registry;
  };
  SandboxHostRoot(Config config, Prepared p);
  // With exit_when_empty_for: every 250 ms, ends the run once no sandbox was held for that long.
  void WatchEmpty();

  const Config config_;
  const std::string host_id_;
  const CgroupManager cgroups_;
  const UniqueFd root_lock_;  // <root>/host.lock, held while this host runs
  const TokenSigner secret_;
  const CallAuthenticator auth_;
  RealClock clock_;
  ServerRunner runner_;
  SandboxHostMetrics metrics_;
  TemplateStore templates_;
  ImageStore images_;  // kept across restarts under the sandbox root (a volume in containers)
  ForkLayers layers_;  // forked sandboxes' shared layers (<root>/forks, wiped at start)
  // What carries fork-ready processes into forks (null where the host cannot fork, or lacks user namespaces).
  std::unique_ptr<Carrier> carrier_;
  // Creates, deletes, evictions and kill sweeps run here, never on a gRPC or the clock's thread; they mostly wait
  // on the kernel (sweeps, wipes, copies), so a few threads beyond the cores.
  WorkerPool workers_{4};
  SandboxManager sandboxes_;
  ExecManager execs_;
  ImagePuller puller_;
  // Imports and pulls (a large image takes minutes) on their own threads, so creates never wait behind them.
  WorkerPool image_workers_{2};
  SandboxService service_;
  absl::Time empty_since_;
};

}  // namespace corral::sandbox
