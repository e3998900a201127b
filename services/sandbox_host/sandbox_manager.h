// The sandboxes of this host: capacity reserved atomically, a uid each and files of their own (a storage kind:
// storage/storage.h), the isolation every process of the sandbox runs under (cgroup, namespaces, Landlock
// ruleset, rlimits, scrubbed environment), capability tokens, forks (sandbox_fork.cc), and teardown that
// kills every process of the uid before anything is freed. Plain C++: no gRPC.
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
#include "services/sandbox_host/fork/carrier.h"
#include "services/sandbox_host/fork/fork_layers.h"
#include "services/sandbox_host/host_options.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/linux/cgroup.h"
#include "services/sandbox_host/linux/driven_carry.h"
#include "services/sandbox_host/linux/landlock.h"
#include "services/sandbox_host/linux/uid_pool.h"
#include "services/sandbox_host/metrics.h"
#include "services/sandbox_host/sandbox.h"
#include "services/sandbox_host/storage/storage.h"
#include "services/sandbox_host/template_store.h"

namespace corral::sandbox {

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
  Carrier* carrier = nullptr;          // carries fork-ready processes into forks (null: none are)
};

// What a sandbox has cost so far (SandboxManager::Usage). -1 where it was not measured.
struct SandboxUsage {
  MeteredUsage metered;
  absl::Duration wall;  // since it was created (a fork's child: since the fork)
  // With UsageQuery.disk: what its own writes take (Storage::OwnBytes), and the fork layers it shares.
  int64_t own_disk_bytes = -1, shared_disk_bytes = -1;
  // An image sandbox with a disk quota: its tmpfs's size and use.
  int64_t quota_bytes = -1, quota_used_bytes = -1;
  std::vector<UsageSample> samples;  // with UsageQuery.samples
};
struct UsageQuery {
  bool disk = false;  // walk its files (time in proportion to their number)
  bool samples = false;
  absl::Time from = absl::InfinitePast(), to = absl::InfiniteFuture();  // which samples
};
// What a delete measures on its way: the usage once the processes are gone, as `query` asks (its files walked
// before they are wiped with `query.disk`).
struct FinalUsage {
  UsageQuery query;
  SandboxUsage usage;
};

// Thread-safe.
class SandboxManager {
 public:
  SandboxManager(HostOptions options, HostFeatures features, Clock* clock, const TokenSigner* signer,
                 SandboxManagerParts parts = {});
  ~SandboxManager();  // deletes every sandbox

  using CarriedProcess = sandbox::CarriedProcess;
  struct Created {
    std::shared_ptr<const Sandbox> sandbox;
    std::string token;  // capability token for this sandbox only
    std::vector<CarriedProcess> carried;
  };
  struct CreateResult {
    std::vector<Created> created;
    int64_t rejected = 0;
    std::string rejected_reason;
    std::vector<std::string> not_carried;  // a fork: the parent's processes (or copies) that were not, and why
  };

  // INVALID_ARGUMENT for a bad spec or count; FAILED_PRECONDITION when the host cannot enforce what the spec
  // requires; NOT_FOUND for an unknown (or still building) template. Capacity and uids are reserved atomically: what
  // does not fit is `rejected`, never over-committed.
  absl::StatusOr<CreateResult> Create(int64_t count, SandboxSpec spec);
  // NOT_FOUND for an unknown or deleted sandbox; UNAVAILABLE while it is being forked. Counts as activity for idle
  // eviction. A sandbox forked since it was last used gets its new generation first (Renew: a few milliseconds, on
  // this thread; calls that come meanwhile wait for it).
  absl::StatusOr<std::shared_ptr<const Sandbox>> Find(const std::string& id);
  // Deletes every sandbox idle (no process running, no API call) for longer than its idle timeout. Runs by
  // itself every second; public for tests. Returns how many were evicted.
  int EvictIdle();
  std::vector<std::shared_ptr<const Sandbox>> List() const;
  // Kills every process of the sandbox's uid, then frees cgroup, home and uid. Returns whether it existed; fills
  // `final_usage` when that is not null.
  bool Delete(const std::string& id, FinalUsage* final_usage = nullptr);
  // Delete, but a sandbox made from an image leaves its writable layer at `dest` (a template build keeps it).
  // NOT_FOUND for an unknown sandbox; FAILED_PRECONDITION for one not made from an image.
  absl::Status DeleteKeepingUpper(const std::string& id, const std::string& dest, FinalUsage* final_usage = nullptr);
  // What the sandbox has cost so far (sandbox_usage.cc). NOT_FOUND once it is being deleted. Blocks while a kill
  // sweep of it runs, and for the walk of its files with `query.disk` (a worker's job).
  absl::StatusOr<SandboxUsage> Usage(const Sandbox& sandbox, const UsageQuery& query) const;
  // Usage when it can answer at once (no walk of the files, no kill sweep of the sandbox under way: a few reads
  // of its cgroup); nullopt otherwise, for a worker's Usage.
  std::optional<absl::StatusOr<SandboxUsage>> UsageNow(const Sandbox& sandbox, const UsageQuery& query) const;
  // ForkSandbox: `count` children of a live sandbox, plain or from an image, each seeing the parent's files as
  // they are now (home and task paths, or the image root's writable layer; and /tmp, unless `empty_tmp`: shared
  // as a layer on the host's filesystem, copied into an image sandbox's own /tmp) as its own, under
  // its own uid, cgroup, namespaces, Landlock and token, with nothing copied; `labels` are added to the parent's.
  // The parent keeps its id, uid, token, cgroup, files and /tmp, with a new mount namespace. Capacity as Create:
  // what does not fit is `rejected`. A fork waits up to `wait` (at least 500 ms) for the parent's processes and
  // calls to end; new calls get UNAVAILABLE meanwhile. FAILED_PRECONDITION when they have not by then, or
  // without HostFeatures.forks; ABORTED when a delete of the parent comes while it waits; NOT_FOUND for an
  // unknown sandbox. Blocks (a worker's job).
  absl::StatusOr<CreateResult> Fork(const std::string& id, int64_t count,
                                    const std::map<std::string, std::string>& labels = {},
                                    absl::Duration wait = absl::ZeroDuration(), bool empty_tmp = false);
  // Kills every process of the sandbox (its uid swept until none is left) and keeps the sandbox: the count of
  // processes that ran. NOT_FOUND for an unknown or deleted sandbox; INTERNAL when one survives the sweep.
  // Blocks while it sweeps (a worker's job).
  absl::StatusOr<uint32_t> KillAllProcesses(const std::string& id);
  // PauseSandbox (`paused`) or ResumeSandbox (sandbox_pause.cc): freezes or thaws its cgroup. Idempotent.
  // NOT_FOUND for an unknown or deleted sandbox; UNAVAILABLE while it forks; FAILED_PRECONDITION without a
  // cgroup freezer. Blocks until the kernel has done it (a worker's job).
  absl::StatusOr<std::shared_ptr<const Sandbox>> SetPaused(const std::string& id, bool paused);

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
  // A sandbox of `spec` with files from `origin` (a parent's new generation at a fork: `origin.previous`'s id,
  // uid, cgroup and create time).
  absl::StatusOr<std::shared_ptr<Sandbox>> Build(const SandboxSpec& spec, const Origin& origin);
  // Takes capacity for up to `count` sandboxes: what was granted.
  int64_t Reserve(int64_t count);
  // Builds the `granted` of `count` sandboxes (the rest: `result.rejected`, as are those no uid is left for).
  // On any other failure, none: those built are torn down.
  absl::StatusOr<std::vector<std::shared_ptr<Sandbox>>> BuildMany(const SandboxSpec& spec, const Origin& origin,
                                                                  int64_t count, int64_t granted, CreateResult& result);
  // Puts `built` in the map, each with its token in `result`.
  void Admit(const std::vector<std::shared_ptr<Sandbox>>& built, CreateResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Storage& StorageOf(StorageKind kind) const { return *storage_[static_cast<int>(kind)]; }
  // Gives back what the files of `sb` took (a pin, a template's count); the caller removes its directory.
  void ReleaseFiles(Sandbox& sb);
  // The sandbox `id`, marked forking (NOT_FOUND; FAILED_PRECONDITION for a template's build or one being forked).
  absl::StatusOr<std::shared_ptr<Sandbox>> StartFork(const std::string& id);
  // A fork's wait until nothing may still write into the parent: no process of its uid, no call holding it.
  absl::Status Quiesce(const std::shared_ptr<Sandbox>& parent, absl::Duration wait);
  // Builds the new generation of `parent` (renewal_due, marked forking by the caller) on the layers its files were
  // frozen into, and puts it in its place; ends the `forking` either way. A parent that fails stays due.
  absl::Status Renew(const std::shared_ptr<Sandbox>& parent);
  // The generation that follows `parent` at a fork, built on the layers its files were frozen into (it takes the
  // parent's cgroup and fork-ready processes; the caller puts it in the parent's place).
  absl::StatusOr<std::shared_ptr<Sandbox>> NextGeneration(const std::shared_ptr<Sandbox>& parent);
  // Carrying (sandbox_carry.cc). ParkForkReady asks each fork-ready process of `parent` for `count` copies and
  // waits (`wait`, at least 5 s) until it and its copies are parked in the gate, and nothing else of the parent
  // runs (FAILED_PRECONDITION otherwise: nothing is carried). CarryAfterFreeze, once `children` are built on the
  // frozen files: each copy goes into its child (`carried`, by child) and each process into the parent's next
  // generation (built now, returned), or all go on as they were when the children failed (GiveUp).
  struct Carry {
    ForkReadyProcess process;
    int batch = 0;
    std::vector<pid_t> copies;
    std::unique_ptr<DrivenCarry> driven;  // a process that does not carry itself: the host drives it
  };
  absl::StatusOr<std::vector<Carry>> ParkForkReady(const std::shared_ptr<Sandbox>& parent, int64_t count,
                                                   absl::Duration wait);
  std::shared_ptr<Sandbox> CarryAfterFreeze(std::vector<Carry>& carries, const std::shared_ptr<Sandbox>& parent,
                                            absl::StatusOr<std::vector<std::shared_ptr<Sandbox>>>& children,
                                            std::vector<std::vector<CarriedProcess>>& carried, CreateResult& result);
  void GiveUp(std::vector<Carry>& carries);
  void CarryInto(std::vector<Carry>& carries, const Sandbox& parent, const Sandbox* next,
                 const std::vector<std::shared_ptr<Sandbox>>& children,
                 std::vector<std::vector<CarriedProcess>>& carried, CreateResult& result);
  // Ends a fork of `sb`: calls reach it (or its new generation) again, and a delete waiting for it goes on.
  void EndFork(Sandbox& sb) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With `keep_upper`, an image sandbox's writable layer is moved there rather than wiped.
  absl::Status Teardown(Sandbox& sandbox, const std::string& keep_upper = "", FinalUsage* final_usage = nullptr);
  // Usage with the sandbox's uid_mu held (its cgroup is not being removed).
  SandboxUsage MeasureLocked(const Sandbox& sandbox, const UsageQuery& query) const;
  // Every second: a reading of each sandbox's cgroup into its meter, on a worker.
  void SampleUsage(std::vector<std::weak_ptr<const Sandbox>> sandboxes) const;

  const HostOptions options_;
  const HostFeatures features_;
  Clock* const clock_;
  const TokenSigner* const signer_;
  SandboxHostMetrics* const metrics_;
  WorkerPool* const workers_;
  TemplateStore* const templates_;
  ImageStore* const images_;
  ForkLayers* const layers_;
  Carrier* const carrier_;
  UidPool uids_;
  std::unique_ptr<Storage> storage_[3];  // by StorageKind

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;  // capacity held by creates in progress
  Clock::TimerId evict_timer_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar fork_ended_;  // a sandbox's `forking` was cleared
};

}  // namespace corral::sandbox
