// One live sandbox: who it is (id, pool uid), how it is confined (namespaces, cgroup, Landlock, environment), and
// its files, in one of three storage kinds (storage/storage.h). Plain C++: no gRPC.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/clock.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/fork/fork_layers.h"
#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/linux/spawn.h"
#include "services/sandbox_host/template_store.h"
#include "services/sandbox_host/usage/usage_meter.h"

namespace corral::sandbox {

// The variable every process started through the API carries with its process id ("p-7") and hands down to
// whatever it starts, setsid or not: what tells one process's escapees from the sandbox's other processes.
inline constexpr char kProcessIdVar[] = "CORRAL_PROCESS_ID";

// Variables the host sets on every process; a spec or an exec may not.
inline bool IsHostSetEnv(const std::string& name) {
  return name == "HOME" || name == "USER" || name == "CORRAL_SANDBOX_ID" || name == kProcessIdVar ||
         name == "CORRAL_CARRY_SIGNAL";
}

struct SandboxSpec {
  std::optional<NetworkPolicy> network;  // unset: the host's default
  std::vector<uint16_t> allowed_ports;   // kProxyOnly only
  CgroupLimits cgroup;                   // zero fields: host defaults
  Rlimits rlimits;                       // zero fields: host defaults
  std::map<std::string, std::string> env;
  std::vector<std::string> task_paths;
  absl::Duration idle_timeout = absl::ZeroDuration();
  bool require_private_view = false;
  std::map<std::string, std::string> labels;
  std::string template_key;
  std::string image;           // name or digest of an image in the host's store; empty: the host's filesystem
  int64_t disk_bytes = 0;      // an image sandbox's upper layer, /tmp and /dev/shm: tmpfs of this size; 0: default
  bool upper_on_disk = false;  // a template's setup: its upper layer on disk, to be kept as a layer (no quota)
};

struct Protections {
  int landlock_abi = 0;
  CgroupMode cgroup = CgroupMode::kNone;
  std::vector<std::string> cgroup_controllers;
  bool mount_namespace = false;
  bool hidepid = false;
  bool network_namespace = false;
  NetworkPolicy network = NetworkPolicy::kNone;
  bool tcp_bind_denied = false;
  bool scoped = false;              // abstract unix sockets and signals (Landlock ABI >= 6)
  int64_t memory_rlimit_bytes = 0;  // no memory cgroup: RLIMIT_DATA per process instead
  int64_t process_rlimit = 0;       // no pids cgroup: RLIMIT_NPROC of the sandbox's uid instead
  bool user_namespace = false;      // an image sandbox: its processes are the image's user in a user namespace
  bool user_ids = false;            // …with every id of 0 … 65535 its own (ImageParts::sub_ids)
  int64_t disk_quota_bytes = 0;     // an image sandbox: the size of its upper layer's tmpfs (0: on disk, no quota)
  std::string containment;          // in words (containment.h)
};

// Where a sandbox's files live (storage/storage.h has what each kind does at a build, a fork and a teardown):
// a plain directory (its home); a home made of a fork's read-only layers under its own upper layer; an image's
// root, with a fork's layers (if any) between the image and its upper layer.
enum class StorageKind { kHome, kLayeredHome, kImageRoot };

// What a sandbox made from an image has beyond the others: the image, the user namespace its processes join, who
// they are inside it, and where they start (the image's WorkingDir, else the user's home). API paths are then
// absolute in the image, or relative to the home, as in any sandbox.
struct ImageParts {
  std::string digest;
  UniqueFd userns;
  uid_t inside_uid = 0;
  gid_t inside_gid = 0;
  bool sub_ids = false;  // its namespace maps every id of 0 … 65535 (root and other users inside are its own)
  std::string workdir;
  dev_t root_dev = 0;  // the overlay's device: nothing of the host's is on it
  // With a tmpfs upper: a detached mount of that tmpfs, what a fork freezes (ForkLayers::FreezeTree).
  UniqueFd rw_tree;
};

// Who a process of an image sandbox runs as inside its user namespace (Command.user), and its HOME.
struct InsideUser {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
};

// A process started fork-ready (ExecOptions::fork_ready): what a fork needs to ask it for copies of itself
// (fork/carrier.h).
struct ForkReadyProcess {
  pid_t pid = 0;
  std::string process_id;  // "p-7"
  std::vector<std::string> argv;
  int kind = 0;                       // its ProcessKind (exec/execution.h)
  std::string output_path;            // a background process's
  int watch = 0;                      // its gate listener's, in the Carrier's TransitGate
  std::shared_ptr<UniqueFd> control;  // the write end of its control pipe
  const void* generation = nullptr;   // the Sandbox object it was started in (it holds a reference to it)
};
// Where a sandbox's fork-ready processes live (linux/carry_root.h), and their Landlock rules.
struct CarryView {
  UniqueFd mnt, root, landlock;
};
// A sandbox's fork-ready processes: shared by its generations, as its cgroup is.
struct ForkReadyList {
  absl::Mutex mu;
  std::vector<ForkReadyProcess> processes ABSL_GUARDED_BY(mu);
};

// One live sandbox. Immutable after creation except where noted; shared by the calls using it.
struct Sandbox {
  // Who it is and how it is confined: every kind.
  std::string id;
  uid_t uid = 0;
  std::string dir;   // the host directory holding its state: its home, or an image sandbox's layers
  std::string home;  // $HOME as its processes see it
  UniqueFd home_fd;  // what API paths resolve from: the home, or an image sandbox's root
  SandboxSpec spec;  // with defaults filled in
  Protections protections;
  std::vector<std::string> base_env;  // "K=V": the scrubbed base plus the spec's env
  SandboxNamespaces namespaces;
  SandboxCgroup cgroup;
  UniqueFd landlock;
  absl::Time create_time;
  std::string forked_from;  // a child: its parent's id
  std::shared_ptr<ForkReadyList> fork_ready = std::make_shared<ForkReadyList>();
  // Made at this generation's first fork-ready process (Carrier::ViewFor; under fork_ready->mu).
  mutable std::shared_ptr<const CarryView> carry_view;
  // A home on the host's filesystem where processes can be carried: the directory its first fork puts in the
  // home's place (made beforehand, so that the Landlock rules of the processes started before the fork name it).
  std::string next_home;

  // Its files: their kind, the template they came from, the fork layers below its own writes (top first; null
  // when it was never forked; at a fork that froze its writes, those layers, until its new generation takes its
  // place), and what an image sandbox adds.
  StorageKind storage = StorageKind::kHome;
  std::shared_ptr<const TemplateImage> template_image;
  LayerStack layers;
  std::optional<ImageParts> image;

  // What calls share while it lives.
  mutable std::atomic<bool> deleted{false};
  // A fork is under way, or the parent's new generation is being built: calls get UNAVAILABLE until it takes the
  // parent's place (set and cleared under the manager's lock).
  mutable std::atomic<bool> forking{false};
  // Its files were frozen into `layers` at a fork and its new generation on them is not built yet: the first call
  // that needs the sandbox builds it (SandboxManager::Renew; `renewing` meanwhile, when other calls wait for it
  // rather than be refused); a delete needs none (set and cleared under the manager's lock, or while `forking`).
  bool renewal_due = false;
  bool renewing = false;
  // Frozen by PauseSandbox (set under uid_mu): commands are refused, idle eviction spares it.
  mutable std::atomic<bool> paused{false};
  // A delete of a sandbox being forked wakes the fork's wait for its processes: the fork gives up.
  mutable WakeableSleep delete_requested;
  // Held by whatever kills by this sandbox's uid (an execution's kill sweep, the teardown), so that no sweep
  // runs once the teardown is done and the uid may already be another sandbox's.
  mutable absl::Mutex uid_mu;
  // Idle eviction: nanoseconds (Unix) of the last API call or process exit, and processes still running.
  mutable std::atomic<int64_t> last_active_ns{0};
  mutable std::atomic<int> running{0};
  void Touch(absl::Time now) const { last_active_ns = absl::ToUnixNanos(now); }
  // What it has cost: shared with the generations that follow it at its forks (as its cgroup is).
  std::shared_ptr<UsageMeter> meter;
  // A process the host started in it began, or ended: idle eviction and the meter's busy time.
  void ProcessStarted(absl::Time now) const {
    running++;
    if (meter) meter->ProcessStarted(now);
  }
  void ProcessEnded(absl::Time now) const {
    running--;
    if (meter) meter->ProcessEnded(now);
  }

  bool in_image() const { return image.has_value(); }
  std::string image_digest() const { return image ? image->digest : ""; }
  // `env` first, then the sandbox's; a name given twice keeps its first value. `user` (an image sandbox's
  // ResolveUser) replaces the image's user and its HOME.
  SpawnSpec SpawnFor(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                     const std::string& cwd, const std::optional<InsideUser>& user = std::nullopt) const;
  // Who Command.user names here (its comment has the rules); nullopt for the image's user.
  absl::StatusOr<std::optional<InsideUser>> ResolveUser(const std::string& user) const;
  // An API path (sandbox_path.h; in an image sandbox, absolute in the image or relative to its home).
  absl::StatusOr<SandboxPath> ParsePath(absl::string_view path, bool allow_home = false) const;
  // Who files the API creates belong to, and which existing files it may read.
  Owner FileOwner() const { return Owner{uid, uid, image ? image->root_dev : 0}; }
};

}  // namespace corral::sandbox
