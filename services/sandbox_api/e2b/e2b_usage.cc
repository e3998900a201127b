// The E2B control plane's answers on what a sandbox used: its metrics over time (`getMetrics`) and its usage so
// far (Corral's own `/sandboxes/{id}/usage`), read from its host.
#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "services/sandbox_api/e2b/e2b_control.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

// A sandbox's usage in the shape Daytona's users asked for (cpu_seconds, memory_gib_seconds, storage_gib_seconds,
// cost), with what else the host measured; null where it was not measured (no cgroup, no disk quota).
json::object UsageJson(const std::string& id, const v1::ResourceUsage& u, const PriceTable& prices) {
  auto seconds = [](const google::protobuf::Duration& d) { return absl::ToDoubleSeconds(FromProto(d)); };
  json::object out{{"sandboxID", JsonText(id)}};
  const bool cpu = u.has_cpu_time(), memory = u.has_memory_gib_seconds();
  out["cpu_seconds"] = cpu ? json::value(seconds(u.cpu_time())) : json::value(nullptr);
  out["memory_gib_seconds"] = memory ? json::value(u.memory_gib_seconds()) : json::value(nullptr);
  out["storage_gib_seconds"] = u.has_disk_gib_seconds() ? json::value(u.disk_gib_seconds()) : json::value(nullptr);
  out["cost"] = !prices.empty() && cpu && memory
                    ? json::value(prices.SandboxCost(seconds(u.cpu_time()), u.memory_gib_seconds()))
                    : json::value(nullptr);
  out["memory_peak_bytes"] = u.has_memory_peak_bytes() ? json::value(u.memory_peak_bytes()) : json::value(nullptr);
  out["disk_bytes"] = u.has_own_disk_bytes() ? json::value(u.own_disk_bytes()) : json::value(nullptr);
  out["shared_disk_bytes"] = u.has_shared_disk_bytes() ? json::value(u.shared_disk_bytes()) : json::value(nullptr);
  out["wall_seconds"] = seconds(u.wall_time());
  out["busy_seconds"] = seconds(u.busy_time());
  out["processes"] = u.processes_started();
  return out;
}

}  // namespace

asio::awaitable<E2bAnswer> E2bControlPlane::Metrics(std::string owner, std::string id,
                                                    std::map<std::string, std::string> query) {
  // [start, end] in Unix seconds, as the SDK sends them; a sample before `start` is asked for too, as the base
  // of the first one's CPU share.
  v1::GetSandboxRequest request;
  request.set_samples(true);
  std::optional<absl::Time> start, end;
  for (const char* bound : {"start", "end"}) {
    auto it = query.find(bound);
    if (it == query.end()) continue;
    int64_t unix = 0;
    if (!absl::SimpleAtoi(it->second, &unix) || unix < 0) {
      co_return E2bError(400, absl::StrCat(bound, " must be a time in Unix seconds"));
    }
    const absl::Time t = absl::FromUnixSeconds(unix);
    if (std::string(bound) == "start") {
      start = t;
      ToProto(t - absl::Seconds(10), request.mutable_samples_from());
    } else {
      end = t;
      ToProto(t, request.mutable_samples_to());
    }
  }
  auto leased = co_await FindLeased(owner, id);
  if (auto* answer = std::get_if<E2bAnswer>(&leased)) co_return std::move(*answer);
  const Leased& found = std::get<Leased>(leased);
  request.set_sandbox_id(found.lease.sandbox_id());
  auto sandbox = co_await found.host->GetSandbox(std::move(request), absl::Seconds(10));
  if (!sandbox.ok()) co_return E2bFromStatus(sandbox.status());
  const v1::ResourceUsage& u = sandbox->usage();
  if (!u.measured()) co_return E2bAnswer{200, "[]", {}};  // no cgroup: nothing measured, never zeros
  // The host's samples (one every 5 s) since the sandbox was leased (a warm one was idle before), and its use
  // now when the last is more than a second old and `end` is not past.
  const absl::Time leased_at = FromProto(found.lease.create_time()), now = clock_->Now();
  std::vector<v1::UsageSample> samples;
  for (const v1::UsageSample& s : u.samples()) {
    if (FromProto(s.time()) >= leased_at) samples.push_back(s);
  }
  const bool open_ended = !end || *end >= now - absl::Seconds(1);
  if (open_ended && (samples.empty() || FromProto(samples.back().time()) < now - absl::Seconds(1))) {
    v1::UsageSample current;
    ToProto(now, current.mutable_time());
    *current.mutable_cpu_time() = u.cpu_time();
    current.set_memory_bytes(u.memory_bytes());
    if (u.disk_total_bytes() > 0) current.set_disk_used_bytes(u.disk_used_bytes());
    samples.push_back(current);
  }
  // Each sample's CPU share is over the time since the one before it (the first's: since the sandbox was created).
  json::array out;
  absl::Time before = leased_at;
  absl::Duration cpu_before;
  const double cpus = std::max<uint32_t>(u.cpu_count(), 1);
  for (const v1::UsageSample& s : samples) {
    const absl::Time t = FromProto(s.time());
    const absl::Duration cpu = FromProto(s.cpu_time());
    const double wall = absl::ToDoubleSeconds(t - before) * cpus;
    const double pct = wall > 0 ? std::clamp(100 * absl::ToDoubleSeconds(cpu - cpu_before) / wall, 0.0, 100.0) : 0;
    before = t;
    cpu_before = cpu;
    if (start && t < *start) continue;  // the base only
    out.push_back(json::object{{"timestamp", JsonText(E2bTime(t))},
                               {"timestampUnix", absl::ToUnixSeconds(t)},
                               {"cpuCount", u.cpu_count()},
                               {"cpuUsedPct", std::round(pct * 100) / 100},
                               {"memUsed", s.memory_bytes()},
                               {"memTotal", u.memory_limit_bytes()},
                               {"diskUsed", s.has_disk_used_bytes() ? s.disk_used_bytes() : u.disk_used_bytes()},
                               {"diskTotal", u.disk_total_bytes()}});
  }
  co_return E2bAnswer{200, json::serialize(out), {}};
}

asio::awaitable<E2bAnswer> E2bControlPlane::Usage(std::string owner, std::string id) {
  auto leased = co_await FindLeased(owner, id);
  if (auto* answer = std::get_if<E2bAnswer>(&leased)) co_return std::move(*answer);
  const Leased& found = std::get<Leased>(leased);
  v1::GetSandboxRequest request;
  request.set_sandbox_id(found.lease.sandbox_id());
  request.set_disk_usage(true);
  auto sandbox = co_await found.host->GetSandbox(std::move(request), absl::Seconds(30));
  if (!sandbox.ok()) co_return E2bFromStatus(sandbox.status());
  co_return E2bAnswer{200, json::serialize(UsageJson(id, sandbox->usage(), options_.prices)), {}};
}

}  // namespace corral::sandbox_api
