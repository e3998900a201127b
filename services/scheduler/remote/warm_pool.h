// The warm pool: sandboxes created ahead of the queue, per sandbox spec (template key, network, limits, env,
// task paths), so the acquire phase of a warm episode costs a pop and a liveness check instead of a create.
// A spec is wanted while episodes asked for it in the last `idle_after`; the filler keeps up to `size` ready
// per wanted spec, only on free capacity (never taking a slot a queued episode could use), and only on hosts
// that already built the spec's template. An inline miss leaves a credit: the filler skips one creation for it,
// so a burst of misses does not create twice. Ready sandboxes of specs no longer wanted are deleted. A spec with
// an image is keyed by the image's name; a take checks the sandbox's image digest against the digest that name
// has on its host now (HostRegistry::ImageDigest), so a name moved to another image never hands out the old one.
// Thread-safe.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "boost/asio/awaitable.hpp"
#include "services/scheduler/remote/host_registry.h"

namespace corral::scheduler {

struct WarmSandbox {
  Slot slot;
  v1::CreatedSandbox created;
};

class WarmPool {
 public:
  // `room` says how many sandbox slots the pool may take now (free capacity not wanted by queued episodes).
  WarmPool(HostRegistry* hosts, Clock* clock, int64_t size_per_spec, std::string scheduler_id,
           std::function<int64_t()> room, absl::Duration idle_after = absl::Seconds(60));

  // The key of a spec (labels excluded).
  static std::string Key(const v1::SandboxSpec& spec);

  // A ready sandbox for `spec` that is still alive, or nullopt (a miss: the caller creates one inline).
  boost::asio::awaitable<std::optional<WarmSandbox>> Take(const v1::SandboxSpec& spec, const Requirements& needs);

  // Fills and trims until `*stopping`; every `interval`.
  boost::asio::awaitable<void> Run(const std::atomic<bool>* stopping,
                                   absl::Duration interval = absl::Milliseconds(200));
  // Deletes every ready sandbox (shutdown).
  boost::asio::awaitable<void> Drain();

  int64_t ready() const;
  int64_t hits() const;
  int64_t misses() const;

 private:
  struct Entry {
    v1::SandboxSpec spec;
    Requirements needs;
    std::deque<WarmSandbox> ready;
    int creating = 0;
    int credits = 0;
    absl::Time wanted_at;
  };
  boost::asio::awaitable<void> Fill();
  boost::asio::awaitable<void> CreateOne(std::string key);
  boost::asio::awaitable<void> Discard(WarmSandbox sandbox);

  HostRegistry* const hosts_;
  Clock* const clock_;
  const int64_t size_;
  const std::string scheduler_id_;
  const std::function<int64_t()> room_;
  const absl::Duration idle_after_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace corral::scheduler
