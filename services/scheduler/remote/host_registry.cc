#include "services/scheduler/remote/host_registry.h"

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/core/host_port.h"
#include "libs/core/logging.h"
#include "libs/http/server.h"
#include "services/sandbox_host/client/host_client.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

HostRegistry::HostRegistry(RegistryOptions options, std::vector<std::string> static_hosts, Clock* clock, Events events,
                           Connector connect)
    : options_(std::move(options)), clock_(clock), connect_(std::move(connect)), events_(std::move(events)) {
  absl::MutexLock lock(&mu_);
  for (const auto& h : static_hosts) Add(h, v1::HOST_SOURCE_STATIC);
}

void HostRegistry::Add(const std::string& address, v1::HostSource source) {
  if (hosts_.count(address)) return;
  absl::StatusOr<std::shared_ptr<sandbox::HostApi>> client;
  if (connect_) {
    client = connect_(address);
  } else if (auto channel = MakeChannel(address, options_.channel); channel.ok()) {
    client = std::make_shared<sandbox::HostClient>(address, *channel, options_.token);
  } else {
    client = channel.status();
  }
  if (!client.ok()) {
    spdlog::error("host {}: {}", address, client.status());
    return;
  }
  Entry& e = hosts_[address];
  e.client = *std::move(client);
  e.source = source;
  if (auto adopted = adopted_.extract(address)) {
    e.in_use = adopted.mapped().in_use;
    e.owned = std::move(adopted.mapped().owned);
  }
  spdlog::info("host {} added ({})", address, source == v1::HOST_SOURCE_DNS ? "dns" : "static");
}

size_t HostRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return hosts_.size();
}

asio::awaitable<void> HostRegistry::Run(const std::atomic<bool>* stopping) {
  while (!*stopping) {
    co_await PollOnce();
    co_await async::SleepFor(*clock_, options_.poll_interval);
  }
}

asio::awaitable<void> HostRegistry::PollOnce() {
  bool resolve = false;
  {
    absl::MutexLock lock(&mu_);
    if (!options_.dns.empty() && clock_->Now() >= next_dns_) {
      next_dns_ = clock_->Now() + options_.dns_interval;
      resolve = true;
    }
  }
  if (resolve) co_await ResolveDns();
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [a, e] : hosts_) addresses.push_back(a);
  }
  for (const auto& a : addresses) co_await Poll(a);
}

asio::awaitable<void> HostRegistry::ResolveDns() {
  auto split = SplitHostPort(options_.dns);
  if (!split.ok()) co_return;
  auto executor = co_await asio::this_coro::executor;
  asio::ip::tcp::resolver resolver(executor);
  auto [ec, results] =
      co_await resolver.async_resolve(split->first, std::to_string(split->second), asio::as_tuple(asio::use_awaitable));
  if (ec) {
    spdlog::warn("hosts_dns {}: {}", options_.dns, ec.message());
    co_return;
  }
  absl::MutexLock lock(&mu_);
  std::set<std::string> seen;
  for (const auto& r : results) {
    const auto ep = r.endpoint();
    const std::string address = ep.address().is_v6() ? absl::StrCat("[", ep.address().to_string(), "]:", ep.port())
                                                     : absl::StrCat(ep.address().to_string(), ":", ep.port());
    seen.insert(address);
    Add(address, v1::HOST_SOURCE_DNS);
  }
  // DNS hosts that left the record and hold nothing of ours are forgotten.
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    if (it->second.source == v1::HOST_SOURCE_DNS && !seen.count(it->first) && it->second.in_use == 0) {
      spdlog::info("host {} left {}", it->first, options_.dns);
      it = hosts_.erase(it);
    } else {
      ++it;
    }
  }
}

asio::awaitable<void> HostRegistry::Poll(std::string address) {
  std::shared_ptr<sandbox::HostApi> client;
  {
    absl::MutexLock lock(&mu_);
    auto it = hosts_.find(address);
    if (it == hosts_.end()) co_return;
    client = it->second.client;
  }
  auto info = co_await client->HostInfo(std::max(options_.poll_interval, absl::Seconds(1)));
  bool lost = false, sweep = false, capacity = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = hosts_.find(address);
    if (it == hosts_.end()) co_return;
    Entry& e = it->second;
    if (info.ok()) {
      capacity = e.state != v1::HOST_STATE_HEALTHY || e.rejected;
      if (e.state != v1::HOST_STATE_HEALTHY) {
        spdlog::info("host {} ({}) is healthy: capacity {}, {} live", address, info->host_id(), info->capacity(),
                     info->live());
      }
      e.state = v1::HOST_STATE_HEALTHY;
      e.info = *std::move(info);
      // What the host now reports itself replaces what this scheduler noted of its pulls (a pull still in
      // flight when the host answered stays noted).
      std::erase_if(e.pulled, [&](const auto& p) { return e.info.image_digests().contains(p.first); });
      e.rejected = false;
      e.failures = 0;
      e.last_error.clear();
      e.last_seen = clock_->Now();
      sweep = !e.swept;
      e.swept = true;
    } else {
      ++e.failures;
      e.last_error = std::string(info.status().message());
      if (e.state != v1::HOST_STATE_UNREACHABLE &&
          (e.failures >= static_cast<uint32_t>(options_.unreachable_after) || e.state == v1::HOST_STATE_UNSPECIFIED)) {
        lost = e.state == v1::HOST_STATE_HEALTHY;
        e.state = v1::HOST_STATE_UNREACHABLE;
        e.swept = false;
        e.templates.clear();  // a restarted host has lost them
        e.pulled.clear();
        spdlog::warn("host {} is unreachable: {}", address, e.last_error);
      }
    }
  }
  if (lost && events_.lost) events_.lost(address);
  if (sweep) co_await Sweep(client);
  if (capacity && events_.capacity) events_.capacity();
}

asio::awaitable<void> HostRegistry::Sweep(std::shared_ptr<sandbox::HostApi> client) {
  v1::ListSandboxesRequest request;
  (*request.mutable_label_selector())[kSchedulerLabel] = options_.scheduler_id;
  request.set_page_size(1000);
  int removed = 0;
  while (true) {
    auto page = co_await client->ListSandboxes(request, absl::Seconds(10));
    if (!page.ok()) {
      spdlog::warn("host {}: cannot list sandboxes to sweep orphans: {}", client->address(), page.status());
      co_return;
    }
    for (const auto& sb : page->sandboxes()) {
      bool owned;
      {
        absl::MutexLock lock(&mu_);
        auto it = hosts_.find(client->address());
        owned = it != hosts_.end() && it->second.owned.count(sb.sandbox_id());
      }
      if (owned) continue;
      if ((co_await client->Delete(sb.sandbox_id(), absl::Seconds(30))).ok()) ++removed;
    }
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  if (removed > 0) spdlog::info("host {}: removed {} sandbox(es) no running episode owns", client->address(), removed);
}

bool HostRegistry::HasCapacity() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [a, e] : hosts_) {
    if (e.state == v1::HOST_STATE_HEALTHY && !e.drained && !e.info.draining() && !e.rejected &&
        e.in_use < e.info.capacity()) {
      return true;
    }
  }
  return false;
}

int64_t HostRegistry::FreeSlots() const {
  absl::MutexLock lock(&mu_);
  int64_t free = 0;
  for (const auto& [a, e] : hosts_) {
    if (e.state == v1::HOST_STATE_HEALTHY && !e.drained && !e.info.draining() && !e.rejected) {
      free += std::max<int64_t>(0, static_cast<int64_t>(e.info.capacity()) - e.in_use);
    }
  }
  return free;
}

absl::StatusOr<Slot> HostRegistry::Reserve(const Requirements& needs, const std::string& template_key) {
  absl::MutexLock lock(&mu_);
  std::vector<HostSnapshot> snaps;
  std::vector<Entry*> entries;
  bool any_offers = false;
  for (auto& [a, e] : hosts_) {
    HostSnapshot s;
    s.address = a;
    s.state = e.state;
    s.draining = e.drained || e.info.draining();
    s.rejected = e.rejected;
    s.capacity = e.info.capacity();
    s.in_use = e.in_use;
    s.has_template = !template_key.empty() && e.templates.count(template_key);
    s.features = e.info.features();
    s.has_image = needs.image.empty() || e.info.image_digests().contains(needs.image) || e.pulled.contains(needs.image);
    s.has_harness = needs.harness.empty() || absl::c_linear_search(e.info.harnesses(), needs.harness);
    HostSnapshot unlimited = s;  // what the host would offer when free and answering again
    unlimited.in_use = 0;
    unlimited.rejected = false;
    // A host that stopped answering may be restarting: the episode waits for it (within its acquire timeout)
    // rather than fail as if no host could ever run it.
    if (unlimited.state == v1::HOST_STATE_UNREACHABLE) unlimited.state = v1::HOST_STATE_HEALTHY;
    if (unlimited.capacity > 0 && Fits(unlimited, needs)) any_offers = true;
    snaps.push_back(std::move(s));
    entries.push_back(&e);
  }
  auto chosen = ChooseHost(snaps, needs);
  if (!chosen) {
    if (!any_offers && !hosts_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no healthy sandbox host offers what the task needs (", needs.private_view ? "private filesystem view, " : "",
          needs.network_namespace ? "network namespaces for NETWORK_POLICY_NONE, " : "",
          needs.landlock_net ? "Landlock ABI >= 4 for PROXY_ONLY, " : "",
          needs.image.empty() ? "" : "image sandboxes (user namespaces and idmapped mounts), ",
          needs.forks ? "forks for Task.branch, " : "",
          needs.harness.empty() ? ""
                                : absl::StrCat("the harness ", needs.harness, " installed (corral harness install ",
                                               needs.harness, "), "),
          "see `corral hosts ls`)"));
    }
    return absl::UnavailableError("every sandbox host is full, draining or unreachable");
  }
  Entry& e = *entries[*chosen];
  ++e.in_use;
  const absl::Duration max_exec = FromProto(e.info.max_exec_timeout());
  return Slot{e.client, e.info.host_id(), max_exec > absl::ZeroDuration() ? max_exec : absl::Hours(1)};
}

void HostRegistry::Release(const std::string& address) {
  {
    absl::MutexLock lock(&mu_);
    auto it = hosts_.find(address);
    if (it == hosts_.end()) {
      if (auto a = adopted_.find(address); a != adopted_.end() && a->second.in_use > 0) --a->second.in_use;
      return;
    }
    if (it->second.in_use == 0) return;
    --it->second.in_use;
  }
  if (events_.capacity) events_.capacity();
}

void HostRegistry::Hold(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto it = hosts_.find(address); it != hosts_.end()) {
    ++it->second.in_use;
  } else {
    ++adopted_[address].in_use;
  }
}

uint32_t HostRegistry::InUse(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  uint32_t n = 0;
  for (const auto& [a, e] : hosts_) {
    if (address.empty() || a == address) n += e.in_use;
  }
  return n;
}

void HostRegistry::MarkRejected(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto it = hosts_.find(address); it != hosts_.end()) it->second.rejected = true;
}

void HostRegistry::Own(const std::string& address, const std::string& sandbox_id) {
  absl::MutexLock lock(&mu_);
  if (auto it = hosts_.find(address); it != hosts_.end()) {
    it->second.owned.insert(sandbox_id);
  } else {
    adopted_[address].owned.insert(sandbox_id);
  }
}

std::shared_ptr<sandbox::HostApi> HostRegistry::Client(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(address);
  return it == hosts_.end() ? nullptr : it->second.client;
}

void HostRegistry::Disown(const std::string& address, const std::string& sandbox_id) {
  absl::MutexLock lock(&mu_);
  if (auto it = hosts_.find(address); it != hosts_.end()) it->second.owned.erase(sandbox_id);
  if (auto it = adopted_.find(address); it != adopted_.end()) it->second.owned.erase(sandbox_id);
}

bool HostRegistry::HasTemplate(const std::string& address, const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(address);
  return it != hosts_.end() && it->second.templates.count(key);
}

bool HostRegistry::HasImage(const std::string& address, const std::string& image) const {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(address);
  return it != hosts_.end() && (it->second.info.image_digests().contains(image) || it->second.pulled.contains(image));
}

void HostRegistry::MarkImage(const std::string& address, const std::string& image, const std::string& digest) {
  absl::MutexLock lock(&mu_);
  if (auto it = hosts_.find(address); it != hosts_.end()) it->second.pulled[image] = digest;
}

std::string HostRegistry::ImageDigest(const std::string& address, const std::string& image) const {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(address);
  if (it == hosts_.end()) return "";
  // A pull since the last HostInfo is the newer word; the next HostInfo that lists the name replaces it.
  if (auto p = it->second.pulled.find(image); p != it->second.pulled.end()) return p->second;
  auto d = it->second.info.image_digests().find(image);
  return d == it->second.info.image_digests().end() ? "" : d->second;
}

void HostRegistry::MarkTemplate(const std::string& address, const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (auto it = hosts_.find(address); it != hosts_.end()) it->second.templates.insert(key);
}

absl::StatusOr<std::string> HostRegistry::SetDraining(const std::string& host, bool draining) {
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [a, e] : hosts_) {
      if (a == host || e.info.host_id() == host) {
        e.drained = draining;
        address = a;
        break;
      }
    }
  }
  if (address.empty()) return absl::NotFoundError(absl::StrCat("no sandbox host '", host, "' (see ListHosts)"));
  if (!draining && events_.capacity) events_.capacity();
  return address;
}

absl::Status HostRegistry::CheckHarness(const std::string& id, const std::string& install) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> others;
  bool any_known = false;
  for (const auto& [a, e] : hosts_) {
    if (e.info.host_id().empty()) continue;  // never answered: nothing known of it yet
    any_known = true;
    if (absl::c_linear_search(e.info.harnesses(), id)) return absl::OkStatus();
    for (const std::string& h : e.info.harnesses()) others.push_back(absl::StrCat(e.info.host_id(), ": ", h));
  }
  if (!any_known) return absl::OkStatus();  // no host answered yet: the episodes wait for one, and placement checks
  return absl::FailedPreconditionError(
      absl::StrCat("the harness ", id, " is installed on no sandbox host: run 'corral harness install ", install,
                   "' on each host (as root; `corral harness list` shows what a host has)",
                   others.empty() ? "" : absl::StrCat("; installed now: ", absl::StrJoin(others, ", "))));
}

std::vector<v1::Host> HostRegistry::List(const std::function<uint32_t(const std::string&)>& running) const {
  std::vector<v1::Host> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [a, e] : hosts_) {
    v1::Host h;
    h.set_address(a);
    h.set_host_id(e.info.host_id());
    h.set_source(e.source);
    h.set_state(e.drained || (e.info.draining() && e.state == v1::HOST_STATE_HEALTHY) ? v1::HOST_STATE_DRAINING
                                                                                      : e.state);
    h.set_capacity(e.info.capacity());
    h.set_live(e.info.live());
    h.set_free(e.info.free());
    *h.mutable_features() = e.info.features();
    h.set_version(e.info.version());
    h.set_running_episodes(running(a));
    if (e.last_seen != absl::InfinitePast()) ToProto(e.last_seen, h.mutable_last_seen_time());
    h.set_consecutive_failures(e.failures);
    h.set_last_error(e.last_error);
    h.mutable_image_digests()->insert(e.info.image_digests().begin(), e.info.image_digests().end());
    for (const auto& [image, digest] : e.pulled) (*h.mutable_image_digests())[image] = digest;
    *h.mutable_harnesses() = e.info.harnesses();
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace corral::scheduler
