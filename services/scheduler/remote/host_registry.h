// The sandbox hosts the scheduler knows (static config and a DNS name re-resolved periodically), their health
// from HostInfo polling, the capacity this scheduler uses on each, and which templates each has built. Hosts
// stay passive: the registry polls them. A host that fails `unreachable_after` checks in a row is reported lost
// (its episodes are retried elsewhere); a host that comes (back) is swept of sandboxes labelled with this
// scheduler's id that no running episode owns. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"
#include "libs/rpc/channel.h"
#include "services/sandbox_host/client/host_api.h"
#include "services/scheduler/remote/placement.h"

namespace corral::scheduler {

struct RegistryOptions {
  std::string scheduler_id = "scheduler";
  std::string token;  // cluster token for the hosts
  ChannelOptions channel;
  absl::Duration poll_interval = absl::Seconds(2);
  int64_t unreachable_after = 3;
  std::string dns;  // NAME:PORT, empty = none
  absl::Duration dns_interval = absl::Seconds(10);
};

// A reserved slot on a host: the client to use, released when the sandbox is gone.
struct Slot {
  std::shared_ptr<sandbox::HostApi> client;
  std::string host_id;
  absl::Duration max_exec_timeout = absl::Hours(1);  // the host's ceiling on Command.timeout
};

class HostRegistry {
 public:
  // Connects to a host by address (the default: sandbox::HostClient over a gRPC channel made from the options).
  using Connector = std::function<absl::StatusOr<std::shared_ptr<sandbox::HostApi>>(const std::string& address)>;
  // What the registry tells the rest of the scheduler (either may be empty).
  struct Events {
    std::function<void(const std::string& address)> lost;  // a host was declared lost
    std::function<void()> capacity;  // capacity may have become free (a host became healthy, a slot was released)
  };
  HostRegistry(RegistryOptions options, std::vector<std::string> static_hosts, Clock* clock, Events events = {},
               Connector connect = nullptr);

  // Polls forever (until `stopping` becomes true): HostInfo on every host each poll interval, DNS re-resolution.
  boost::asio::awaitable<void> Run(const std::atomic<bool>* stopping);

  // True when some host could take a sandbox now (ignoring features): the dispatcher's admission test.
  bool HasCapacity() const;
  // Sandboxes the healthy, undrained hosts can still take (capacity - in use), summed.
  int64_t FreeSlots() const;
  // Reserves one sandbox slot on the best host for `needs` (preferring hosts with `template_key`);
  // FAILED_PRECONDITION when no known host offers what is needed, UNAVAILABLE when all that do are full.
  absl::StatusOr<Slot> Reserve(const Requirements& needs, const std::string& template_key);
  void Release(const std::string& address);
  // A sandbox this scheduler got on `address` without Reserve (a fork, a lease restored at start): counted in use
  // until Release. On an address not known yet (a DNS host not resolved yet), it counts once the host is added.
  void Hold(const std::string& address);
  // Sandboxes this scheduler holds (or is creating or deleting) on `address`, or on every host when empty.
  uint32_t InUse(const std::string& address) const;
  // The host answered "full": no more placements there until its next HostInfo.
  void MarkRejected(const std::string& address);
  // Sandboxes this scheduler owns, so the sweep spares them (on an address not known yet, once it is added).
  void Own(const std::string& address, const std::string& sandbox_id);
  void Disown(const std::string& address, const std::string& sandbox_id);
  // The client of a known host; null when `address` is not known (yet).
  std::shared_ptr<sandbox::HostApi> Client(const std::string& address) const;
  bool HasTemplate(const std::string& address, const std::string& key) const;
  void MarkTemplate(const std::string& address, const std::string& key);
  // Whether the host holds `image` (its last HostInfo listed it, or this scheduler had it pulled there since).
  bool HasImage(const std::string& address, const std::string& image) const;
  // The host now holds `image` as `digest` (a pull this scheduler had it do).
  void MarkImage(const std::string& address, const std::string& image, const std::string& digest);
  // The digest `image` names on the host now; empty when unknown.
  std::string ImageDigest(const std::string& address, const std::string& image) const;

  // OK when some host that answered lists the harness `id` (NAME@VERSION) as installed, or when no host has
  // answered yet; FAILED_PRECONDITION saying what to run (`install`: the `corral harness install` argument).
  absl::Status CheckHarness(const std::string& id, const std::string& install) const;

  // Drain one host (by address or host_id); NOT_FOUND if unknown. Returns the address.
  absl::StatusOr<std::string> SetDraining(const std::string& host, bool draining);
  // Hosts ordered by address, with the scheduler's counts; `running` gives running episodes per address.
  std::vector<v1::Host> List(const std::function<uint32_t(const std::string&)>& running) const;
  size_t size() const;
  // Polls every host once now (tests, startup).
  boost::asio::awaitable<void> PollOnce();

 private:
  struct Entry {
    std::shared_ptr<sandbox::HostApi> client;
    v1::HostSource source = v1::HOST_SOURCE_STATIC;
    v1::HostState state = v1::HOST_STATE_UNSPECIFIED;
    v1::HostInfoResponse info;
    bool drained = false;  // by Drain
    bool rejected = false;
    uint32_t in_use = 0;
    absl::Time last_seen = absl::InfinitePast();
    uint32_t failures = 0;
    std::string last_error;
    std::set<std::string> templates;
    std::map<std::string, std::string> pulled;  // images this scheduler had the host pull since its last HostInfo
    std::set<std::string> owned;
    bool swept = false;  // orphans removed since it became healthy
  };

  void Add(const std::string& address, v1::HostSource source) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  boost::asio::awaitable<void> Poll(std::string address);
  boost::asio::awaitable<void> Sweep(std::shared_ptr<sandbox::HostApi> client);
  boost::asio::awaitable<void> ResolveDns();

  const RegistryOptions options_;
  Clock* const clock_;
  const Connector connect_;
  const Events events_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> hosts_ ABSL_GUARDED_BY(mu_);
  // Hold and Own on addresses not known yet, applied when they are added.
  struct Adopted {
    uint32_t in_use = 0;
    std::set<std::string> owned;
  };
  std::map<std::string, Adopted> adopted_ ABSL_GUARDED_BY(mu_);
  absl::Time next_dns_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace corral::scheduler
