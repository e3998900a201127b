// The sandboxes of this host: capacity reserved atomically, a uid and a private 0700 home each, the isolation
// every process of the sandbox runs under (cgroup, namespaces, Landlock ruleset, rlimits, scrubbed
// environment), capability tokens, and teardown that kills every process of the uid before anything is freed.
// Plain C++: no gRPC.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/core/clock.h"
#include "libs/core/token.h"
#include "libs/core/unique_fd.h"
#include "libs/core/worker_pool.h"
#include "services/sandbox_host/fork_layers.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/linux/spawn.h"
#include "services/sandbox_host/linux/uid_pool.h"
#include "services/sandbox_host/metrics.h"
#include "services/sandbox_host/template_store.h"

namespace corral::sandbox {

struct HostOptions {
  std::string root = "/var/lib/corral/sandboxes";  // homes live in <root>/homes/<id>
  int64_t capacity = 64;
  int64_t max_create_count = 10000;
  uid_t uid_first = 20000;
  uid_t uid_last = 65000;
  absl::flat_hash_set<uid_t> busy_uids;  // never handed out: still running processes at start (Leftovers)
  NetworkPolicy default_network = NetworkPolicy::kNone;
  CgroupLimits default_cgroup{.memory_bytes = 2ULL << 30, .max_pids = 512, .cpu_weight = 100};
  CgroupLimits cgroup_ceiling{.memory_bytes = 64ULL << 30, .max_pids = 32768, .cpu_weight = 10000};
  Rlimits default_rlimits{
      .nproc = 512, .address_space_bytes = 0, .nofile = 1024, .file_size_bytes = 1LL << 30, .cpu_seconds = 0};
  Rlimits rlimit_ceiling{.nproc = 32768,
                         .address_space_bytes = 1LL << 40,
                         .nofile = 65536,
                         .file_size_bytes = 1LL << 40,
                         .cpu_seconds = 86400};
  int64_t default_disk_bytes = 1LL << 30;  // what an image sandbox may write (SandboxSpec.disk_bytes)
  int64_t max_disk_bytes = 64LL << 30;
  size_t max_env_bytes = 64 * 1024;
  absl::Duration default_idle_timeout = absl::Minutes(10);
  absl::Duration max_idle_timeout = absl::Hours(24);
  absl::Duration default_exec_timeout = absl::Minutes(10);  // Exec / ExecInteractive without a timeout
  absl::Duration max_exec_timeout = absl::Hours(24);
  absl::Duration default_setup_timeout = absl::Minutes(30);  // a whole template build
  TemplateLimits templates;
};

// What the host can enforce, found once at startup.
struct HostFeatures {
  int landlock_abi = 0;
  bool mount_namespaces = false;
  bool images = false;  // user namespaces and idmapped overlay layers (CanUseImages)
  // ForkSandbox of plain sandboxes: mount namespaces, idmapped layers (as images) and a ForkLayers store.
  bool forks = false;
  const CgroupManager* cgroups = nullptr;
};

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
  int64_t disk_quota_bytes = 0;     // an image sandbox: the size of its upper layer's tmpfs (0: on disk, no quota)
  std::string containment;          // in words (containment.h)
};

// One live sandbox. Immutable after creation except where noted; shared by the calls using it.
struct Sandbox {
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
  std::shared_ptr<const TemplateImage> template_image;  // what the home was cloned from
  // A sandbox made from an image: the image, the user namespace its processes join, who they are inside it, and
  // where they start (the image's WorkingDir, else the user's home); API paths are then absolute in the image,
  // or relative to the home, as in any sandbox.
  std::string image_digest;
  UniqueFd userns;
  uid_t inside_uid = 0;
  gid_t inside_gid = 0;
  std::string workdir;
  dev_t root_dev = 0;  // the overlay's device: nothing of the host's is on it
  // An image sandbox with a tmpfs upper: a detached mount of that tmpfs, what a fork freezes (ForkLayers).
  UniqueFd rw_tree;
  // A sandbox that was forked, or is a fork: a plain one's home is an overlay of these layers (top first) under
  // `dir`/rw/upper, mounted over `dir` in its own mount namespace (null: a plain directory); an image one's root
  // has them above the image's layers.
  LayerStack layers;
  std::string forked_from;  // a child: its parent's id
  mutable std::atomic<bool> deleted{false};
  // A fork is under way: calls get UNAVAILABLE until the parent's new generation takes its place.
  mutable std::atomic<bool> forking{false};
  // A delete waits for the fork; a fork still waiting for the sandbox's processes gives up.
  mutable std::atomic<bool> delete_requested{false};
  // Held by whatever kills by this sandbox's uid (an execution's kill sweep, the teardown), so that no sweep
  // runs once the teardown is done and the uid may already be another sandbox's.
  mutable absl::Mutex uid_mu;
  // Idle eviction: nanoseconds (Unix) of the last API call or process exit, and processes still running.
  mutable std::atomic<int64_t> last_active_ns{0};
  mutable std::atomic<int> running{0};
  void Touch(absl::Time now) const { last_active_ns = absl::ToUnixNanos(now); }

  bool in_image() const { return !image_digest.empty(); }
  // `env` first, then the sandbox's; a name given twice keeps its first value.
  SpawnSpec SpawnFor(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                     const std::string& cwd) const;
  // An API path (sandbox_path.h; in an image sandbox, absolute in the image or relative to its home).
  absl::StatusOr<SandboxPath> ParsePath(absl::string_view path, bool allow_home = false) const;
  // Who files the API creates belong to, and which existing files it may read.
  Owner FileOwner() const { return Owner{uid, uid, root_dev}; }
};

// What capability tokens of sandboxes are signed for.
inline constexpr char kSandboxTokenPurpose[] = "sandbox";

// OK when every directory from / down to `root` may be searched by any uid (mode o+x), so that a sandbox's uid
// reaches its home below it; otherwise FAILED_PRECONDITION naming the first directory that blocks (e.g. a
// container's 0750 state directory), checked at start-up rather than failing every exec with EACCES.
absl::Status CheckSandboxesCanReach(const std::string& root);

// What a SandboxManager works with beyond the host itself; each may be null (tests).
struct SandboxManagerParts {
  SandboxHostMetrics* metrics = nullptr;
  ForkLayers* layers = nullptr;        // where forks keep their layers (null: no ForkSandbox)
  TemplateStore* templates = nullptr;  // where CreateSandboxes finds templates (null: none)
  ImageStore* images = nullptr;        // where CreateSandboxes finds images (null: none)
  WorkerPool* workers = nullptr;       // where idle evictions are torn down (null: on the clock's thread)
};

// Thread-safe.
class SandboxManager {
 public:
  SandboxManager(HostOptions options, HostFeatures features, Clock* clock, const TokenSigner* signer,
                 SandboxManagerParts parts = {});
  ~SandboxManager();  // deletes every sandbox

  struct Created {
    std::shared_ptr<const Sandbox> sandbox;
    std::string token;  // capability token for this sandbox only
  };
  struct CreateResult {
    std::vector<Created> created;
    int64_t rejected = 0;
    std::string rejected_reason;
  };

  // INVALID_ARGUMENT for a bad spec or count; FAILED_PRECONDITION when the host cannot enforce what the spec
  // requires; NOT_FOUND for an unknown (or still building) template. Capacity and uids are reserved atomically: what
  // does not fit is `rejected`, never over-committed.
  absl::StatusOr<CreateResult> Create(int64_t count, SandboxSpec spec);
  // NOT_FOUND for an unknown or deleted sandbox. Counts as activity for idle eviction.
  absl::StatusOr<std::shared_ptr<const Sandbox>> Find(const std::string& id) const;
  // Deletes every sandbox idle (no process running, no API call) for longer than its idle timeout. Runs by
  // itself every second; public for tests. Returns how many were evicted.
  int EvictIdle();
  std::vector<std::shared_ptr<const Sandbox>> List() const;
  // Kills every process of the sandbox's uid, then frees cgroup, home and uid. Returns whether it existed.
  bool Delete(const std::string& id);
  // Delete, but a sandbox made from an image leaves its writable layer at `dest` (a template build keeps it).
  // NOT_FOUND for an unknown sandbox; FAILED_PRECONDITION for one not made from an image.
  absl::Status DeleteKeepingUpper(const std::string& id, const std::string& dest);
  // ForkSandbox: `count` children of a live sandbox, plain or from an image, each seeing the parent's files as
  // they are now (home and task paths, or the image root's writable layer; /tmp starts empty) as its own, under
  // its own uid, cgroup, namespaces, Landlock and token, with nothing copied; `labels` are added to the parent's.
  // The parent keeps its id, uid, token, cgroup, files and /tmp, with a new mount namespace. Capacity as Create:
  // what does not fit is `rejected`. A fork waits up to `wait` (at least 500 ms) for the parent's processes and
  // calls to end; new calls get UNAVAILABLE meanwhile. FAILED_PRECONDITION when they have not by then, or
  // without HostFeatures.forks; ABORTED when a delete of the parent comes while it waits; NOT_FOUND for an
  // unknown sandbox. Blocks (a worker's job).
  absl::StatusOr<CreateResult> Fork(const std::string& id, int64_t count,
                                    const std::map<std::string, std::string>& labels = {},
                                    absl::Duration wait = absl::ZeroDuration());
  // Kills every process of the sandbox (its uid swept until none is left) and keeps the sandbox: the count of
  // processes that ran. NOT_FOUND for an unknown or deleted sandbox; INTERNAL when one survives the sweep.
  // Blocks while it sweeps (a worker's job).
  absl::StatusOr<uint32_t> KillAllProcesses(const std::string& id);

  // OK when `token` is this sandbox's capability token; PERMISSION_DENIED for a sibling's token,
  // UNAUTHENTICATED for anything else.
  absl::Status CheckSandboxToken(const std::string& id, const std::string& token) const;

  int64_t capacity() const { return options_.capacity; }
  int64_t live() const;
  const HostFeatures& features() const { return features_; }
  const HostOptions& options() const { return options_; }
  const UidPool& uids() const { return uids_; }

 private:
  absl::Status Normalize(SandboxSpec& spec) const;
  // A forked sandbox's home: `layers` under a fresh upper layer. A child's /tmp starts empty; the parent's new
  // generation (`parent`) keeps its id, uid, cgroup, create time and /tmp.
  struct Layering {
    LayerStack layers;
    Sandbox* parent = nullptr;
  };
  // `tmpl`: the template (a home to copy, or a layer above `oci_image`), or null.
  absl::StatusOr<std::shared_ptr<Sandbox>> Build(const SandboxSpec& spec,
                                                 const std::shared_ptr<const TemplateImage>& tmpl,
                                                 const Image* oci_image, const Layering* layering = nullptr);
  // The layered home of `sb` (its upper layer made, its mount namespace with the overlay), filling `landlock_fds`
  // with what its processes may write.
  absl::Status BuildLayeredHome(Sandbox& sb, const Layering& layering);
  // Takes capacity for up to `count` sandboxes: what was granted.
  int64_t Reserve(int64_t count);
  // The image root, user namespace and user of a sandbox made from `image`.
  // With `layering`, a fork's: its layers above the image's (and, for the parent's new generation, /tmp and
  // /dev/shm carried over).
  absl::Status BuildImageRoot(Sandbox& sb, const Image& image, const std::shared_ptr<const TemplateImage>& layer,
                              const Layering* layering = nullptr);
  // User namespaces mapping each owner of `layers` other than `uid` to `uid` (for idmapped layers), by owner.
  absl::StatusOr<std::map<uid_t, UniqueFd>> LayerUserNamespaces(const LayerStack& layers, uid_t uid);
  // With `keep_upper`, an image sandbox's writable layer is moved there rather than wiped.
  absl::Status Teardown(Sandbox& sandbox, const std::string& keep_upper = "");

  const HostOptions options_;
  const HostFeatures features_;
  Clock* const clock_;
  const TokenSigner* const signer_;
  SandboxHostMetrics* const metrics_;
  WorkerPool* const workers_;
  TemplateStore* const templates_;
  ImageStore* const images_;
  ForkLayers* const layers_;
  UidPool uids_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;  // capacity held by creates in progress
  Clock::TimerId evict_timer_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace corral::sandbox
