// SandboxManager::Fork (ForkSandbox): wait until nothing runs in the parent but its fork-ready processes, have
// those make their copies (sandbox_carry.cc), freeze what it wrote into a layer (its storage kind knows how:
// storage/storage.h), give the parent a new generation on that layer, build the children on it, and carry the
// copies into them. fork_layers.h has the layer model.
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "libs/api/ids.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/sandbox_manager.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {

absl::Status SandboxManager::Quiesce(const std::shared_ptr<Sandbox>& parent, absl::Duration wait) {
  // Nothing may still write into what is about to be frozen: no process of its uid (background and escaped ones
  // included), no call holding it (any reference but the map's and ours: an exec, a file stream) — but its
  // fork-ready processes, which the fork carries (each holds the generation it started in). With `wait`, they
  // get that long to end; without, 500 ms (a finished exec is held a moment while its output drains). The wait is
  // on the manager's clock, and a delete of the parent cuts it short.
  const absl::Time give_up = clock_->Now() + std::max(wait, absl::Milliseconds(500));
  for (;;) {
    absl::flat_hash_set<pid_t> ready;
    long held = 0;
    {
      absl::MutexLock lock(&parent->fork_ready->mu);
      for (const ForkReadyProcess& p : parent->fork_ready->processes) {
        ready.insert(p.pid);
        held += p.generation == parent.get() ? 1 : 0;
      }
    }
    size_t processes = 0;
    {
      absl::MutexLock uid_lock(&parent->uid_mu);
      for (pid_t pid : ProcessesOf(parent->uid)) processes += ready.contains(pid) ? 0 : 1;
    }
    if (processes == 0 && parent->running == held && parent.use_count() <= 2 + held) return absl::OkStatus();
    if (parent->delete_requested.woken()) {
      return absl::AbortedError(absl::StrCat("sandbox '", parent->id, "' is being deleted; the fork was given up"));
    }
    if (clock_->Now() >= give_up) {
      return absl::FailedPreconditionError(
          processes > 0
              ? absl::StrCat("sandbox '", parent->id, "' has ", processes,
                             " process(es) running (background ones included) that a fork cannot carry (only "
                             "fork-ready ones are): end them first, or fork with a wait")
              : absl::StrCat("sandbox '", parent->id, "' has a call under way; a fork waits for none unless asked"));
    }
    parent->delete_requested.SleepFor(*clock_, absl::Milliseconds(5));
  }
}

void SandboxManager::EndFork(Sandbox& sb) {
  sb.forking = false;
  fork_ended_.SignalAll();
}

absl::StatusOr<std::shared_ptr<Sandbox>> SandboxManager::NextGeneration(const std::shared_ptr<Sandbox>& parent) {
  Storage& files = StorageOf(parent->storage);
  CORRAL_ASSIGN_OR_RETURN(Origin origin, files.ForkOrigin(*parent));
  origin.layers = parent->layers;
  origin.previous = parent.get();
  CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> next, Build(parent->spec, origin));
  next->cgroup = std::move(parent->cgroup);
  next->template_image = parent->template_image;
  next->fork_ready = parent->fork_ready;
  files.Retire(*parent);
  return next;
}

absl::Status SandboxManager::Renew(const std::shared_ptr<Sandbox>& parent) {
  const absl::Time start = clock_->Now();
  absl::StatusOr<std::shared_ptr<Sandbox>> next = NextGeneration(parent);
  absl::MutexLock lock(&mu_);
  parent->renewing = false;
  if (next.ok()) {
    parent->renewal_due = false;
    auto it = sandboxes_.find(parent->id);
    if (it != sandboxes_.end() && it->second == parent) it->second = *next;
  }
  EndFork(*parent);
  if (!next.ok()) {
    spdlog::warn("sandbox {}: building its files anew after its fork: {}", parent->id, next.status());
    return absl::Status(
        next.status().code(),
        absl::StrCat("sandbox '", parent->id, "' could not be made ready after its fork: ", next.status().message()));
  }
  spdlog::debug("sandbox {}: its new generation after its fork, built in {}", parent->id,
                absl::FormatDuration(clock_->Now() - start));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Sandbox>> SandboxManager::StartFork(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return absl::NotFoundError(absl::StrCat("sandbox '", id, "' not found"));
  if (it->second->spec.upper_on_disk) {
    return absl::FailedPreconditionError(absl::StrCat("sandbox '", id, "' builds a template: it cannot be forked"));
  }
  if (it->second->forking) return absl::FailedPreconditionError(absl::StrCat("sandbox '", id, "' is being forked"));
  it->second->forking = true;  // from here, new calls on it get UNAVAILABLE
  return it->second;
}

absl::StatusOr<SandboxManager::CreateResult> SandboxManager::Fork(const std::string& id, int64_t count,
                                                                  const std::map<std::string, std::string>& labels,
                                                                  absl::Duration wait, bool empty_tmp) {
  if (count < 1 || count > options_.max_create_count) {
    return absl::InvalidArgumentError(absl::StrCat("count must be 1-", options_.max_create_count));
  }
  if (!features_.forks || layers_ == nullptr) {
    return absl::FailedPreconditionError(
        "this host cannot fork sandboxes (it needs mount namespaces and idmapped mounts: Linux 5.19+, "
        "CAP_SYS_ADMIN, its root on ext4/xfs/btrfs)");
  }
  CORRAL_RETURN_IF_ERROR(ValidateLabels("labels", labels));
  CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> parent, StartFork(id));
  const int64_t granted = Reserve(count);
  auto finish = [&](absl::Status s) {
    absl::MutexLock lock(&mu_);
    reserved_ -= granted;
    EndFork(*parent);
    const bool refused = absl::IsFailedPrecondition(s) || absl::IsAborted(s);
    if (metrics_) metrics_->forks.Add({{"outcome", refused ? "refused" : "failed"}}).Increment();
    return s;
  };
  const absl::Time asked = clock_->Now();
  if (absl::Status s = Quiesce(parent, wait); !s.ok()) return finish(s);
  // Its fork-ready processes make their copies now, and wait in the gate (with them) while the files are frozen.
  std::vector<Carry> carries;
  if (carrier_ != nullptr) {
    auto parked = ParkForkReady(parent, granted, wait);
    if (!parked.ok()) return finish(parked.status());
    carries = *std::move(parked);
  }
  const absl::Time start = clock_->Now();
  Storage& files = StorageOf(parent->storage);
  absl::StatusOr<Origin> origin = files.ForkOrigin(*parent);
  if (!origin.ok()) {
    GiveUp(carries);
    return finish(origin.status());
  }
  // Freeze what the parent wrote since its last fork into a layer, on which its new generation is built when it is
  // next used (Renew: a parent that is only deleted after its fork, as a verifier's is, never pays for one); when
  // it wrote nothing, or was not used since its last fork, its layers are shared as they are.
  absl::StatusOr<Frozen> frozen = parent->renewal_due ? Frozen{parent->layers, false} : files.Freeze(*parent);
  if (!frozen.ok()) {
    GiveUp(carries);
    return finish(frozen.status());
  }
  origin->layers = frozen->layers;
  origin->forked_from = id;
  origin->empty_tmp = empty_tmp;
  if (frozen->changed) {
    parent->layers = frozen->layers;  // what its files are now, and what it keeps alive
    parent->renewal_due = true;
  }
  const absl::Time frozen_at = clock_->Now();
  SandboxSpec child_spec = parent->spec;
  for (const auto& [k, v] : labels) child_spec.labels[k] = v;
  CreateResult result;
  auto children = BuildMany(child_spec, *origin, count, granted, result);
  // What of the parent's /tmp the layers do not hold (an image sandbox's tmpfs), into each child.
  if (children.ok() && !empty_tmp) {
    for (const std::shared_ptr<Sandbox>& child : *children) {
      if (absl::Status s = files.CarryTmp(*parent, *child); !s.ok()) {
        children = s;
        break;
      }
    }
  }
  std::vector<std::vector<CarriedProcess>> carried;
  std::shared_ptr<Sandbox> next = CarryAfterFreeze(carries, parent, children, carried, result);
  // The parent's files stay in the layer even when no child could be made: its new generation is built on it.
  absl::MutexLock lock(&mu_);
  reserved_ -= granted;
  parent->Touch(clock_->Now());  // a fork is a use of it: its idle time starts again
  if (next != nullptr) {
    parent->renewal_due = false;
    auto it = sandboxes_.find(parent->id);
    if (it != sandboxes_.end() && it->second == parent) it->second = next;
  }
  EndFork(*parent);
  if (!children.ok()) {
    if (metrics_) metrics_->forks.Add({{"outcome", "failed"}}).Increment();
    return children.status();
  }
  Admit(*children, result);
  for (size_t i = 0; i < carried.size() && i < result.created.size(); ++i) {
    result.created[i].carried = std::move(carried[i]);
  }
  if (metrics_) {
    metrics_->forks.Add({{"outcome", "forked"}}).Increment();
    metrics_->fork_seconds.Observe(absl::ToDoubleSeconds(clock_->Now() - start));
  }
  const absl::Time end = clock_->Now();
  spdlog::info("sandbox {}: forked into {} in {} (freeze {}, the children {}; after {} waiting for its calls to end){}",
               id, children->size(), absl::FormatDuration(end - start), absl::FormatDuration(frozen_at - start),
               absl::FormatDuration(end - frozen_at), absl::FormatDuration(start - asked),
               frozen->changed ? "" : " (nothing written since its last fork)");
  return result;
}

}  // namespace corral::sandbox
