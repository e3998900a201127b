#include "services/proxy/upstreams.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/host_port.h"
#include "libs/http/url.h"

namespace corral::proxy {

uint64_t Hash64(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64, then a final mix so neighbours spread on the ring
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

absl::StatusOr<UpstreamSpec> ParseUpstreamUrl(const std::string& url) {
  auto parsed = http::ParseHttpUrl(url, "upstream");
  if (!parsed.ok()) return parsed.status();
  UpstreamSpec spec;
  spec.host = parsed->host;
  spec.port = static_cast<uint16_t>(parsed->port);
  spec.name = parsed->authority();
  return spec;
}

bool Upstream::Serves(const std::string& model) const {
  return spec.models.empty() || std::find(spec.models.begin(), spec.models.end(), model) != spec.models.end();
}

void Upstream::SetDiscovered(std::vector<std::string> models) {
  absl::MutexLock lock(&mu_);
  discovered_ = std::move(models);
}

std::vector<std::string> Upstream::discovered() const {
  absl::MutexLock lock(&mu_);
  return discovered_;
}

void Upstream::SetHealth(bool ok, std::string why) {
  absl::MutexLock lock(&mu_);
  healthy = ok;
  health_error_ = ok ? "" : std::move(why);
}

std::string Upstream::health_error() const {
  absl::MutexLock lock(&mu_);
  return health_error_;
}

UpstreamPool::UpstreamPool(std::vector<UpstreamSpec> specs, Clock* clock, BreakerOptions breaker)
    : clock_(clock), breaker_(breaker) {
  for (auto& spec : specs) {
    auto u = std::make_unique<Upstream>();
    u->spec = std::move(spec);
    u->index = static_cast<int>(raw_.size());
    raw_.push_back(u.get());
    upstreams_.push_back(std::move(u));
  }
  for (size_t i = 0; i < raw_.size(); ++i) {
    const int vnodes = 100 * std::max(1, raw_[i]->spec.weight);
    for (int v = 0; v < vnodes; ++v) ring_.emplace_back(Hash64(absl::StrCat(raw_[i]->spec.name, "#", v)), i);
  }
  std::sort(ring_.begin(), ring_.end());
}

bool UpstreamPool::Available(const Upstream& u) const {
  return u.healthy.load() && absl::ToUnixNanos(clock_->Now()) >= u.open_until_ns.load();
}

bool UpstreamPool::Serves(const std::string& model) const {
  return std::any_of(raw_.begin(), raw_.end(), [&](const Upstream* u) { return u->Serves(model); });
}

bool UpstreamPool::Panicking(const std::string& model) const {
  size_t serving = 0, available = 0;
  for (const Upstream* u : raw_) {
    if (!u->Serves(model)) continue;
    ++serving;
    available += Available(*u) ? 1 : 0;
  }
  return serving > 0 &&
         available * 100 < static_cast<size_t>(std::max<int64_t>(0, breaker_.panic_threshold_percent)) * serving;
}

Upstream* UpstreamPool::Pick(const std::string& env_id, const std::string& model, const std::vector<Upstream*>& tried) {
  const bool panic = Panicking(model);
  auto usable = [&](Upstream* u) {
    return u->Serves(model) && (panic || Available(*u)) && std::find(tried.begin(), tried.end(), u) == tried.end();
  };
  // Sticky: the first upstream serving the model clockwise from the session's point on the ring.
  if (!ring_.empty()) {
    const uint64_t h = Hash64(env_id);
    auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, size_t{0}));
    for (size_t step = 0; step < ring_.size(); ++step, ++it) {
      if (it == ring_.end()) it = ring_.begin();
      Upstream* u = raw_[it->second];
      if (!u->Serves(model)) continue;
      if (usable(u)) return u;
      break;  // the sticky one is unavailable: fall back to the least loaded
    }
  }
  Upstream* best = nullptr;
  for (Upstream* u : raw_) {
    if (usable(u) && (best == nullptr || u->outstanding.load() < best->outstanding.load())) best = u;
  }
  return best;
}

void UpstreamPool::Succeeded(Upstream* u) {
  u->consecutive_failures = 0;
  u->open_until_ns = 0;
  if (!u->healthy.load()) u->SetHealth(true, "");
}

std::string UpstreamPool::Skipped(const std::string& model, const std::vector<Upstream*>& tried) const {
  if (Panicking(model)) return "";
  const absl::Time now = clock_->Now();
  std::vector<std::string> skipped;
  for (const Upstream* u : raw_) {
    if (!u->Serves(model) || Available(*u) || std::find(tried.begin(), tried.end(), u) != tried.end()) continue;
    if (!u->healthy.load()) {
      skipped.push_back(absl::StrCat(u->spec.name, " (unhealthy: ", u->health_error(), ")"));
    } else {
      const absl::Duration left = absl::FromUnixNanos(u->open_until_ns.load()) - now;
      skipped.push_back(absl::StrCat(u->spec.name, " (circuit open for ",
                                     absl::FormatDuration(absl::Ceil(left, absl::Seconds(1))), " more after ",
                                     breaker_.failures_to_open, " consecutive failures)"));
    }
  }
  return absl::StrJoin(skipped, ", ");
}

void UpstreamPool::Failed(Upstream* u) {
  if (++u->consecutive_failures >= breaker_.failures_to_open) {
    u->open_until_ns = absl::ToUnixNanos(clock_->Now() + breaker_.open_for);
    u->consecutive_failures = 0;
  }
}

std::vector<std::string> UpstreamPool::models() const {
  std::set<std::string> all;
  for (const auto& u : upstreams_) {
    all.insert(u->spec.models.begin(), u->spec.models.end());
    for (auto& m : u->discovered()) all.insert(std::move(m));
  }
  return {all.begin(), all.end()};
}

std::optional<std::vector<std::string>> UpstreamPool::known_models() const {
  for (const auto& u : upstreams_) {
    if (u->spec.models.empty() && u->discovered().empty()) return std::nullopt;
  }
  return models();
}

bool UpstreamPool::ServesNatively(const std::string& model, absl::string_view dialect) const {
  bool any = false;
  for (const auto& u : upstreams_) {
    if (!u->Serves(model)) continue;
    any = true;
    if (std::find(u->spec.dialects.begin(), u->spec.dialects.end(), dialect) == u->spec.dialects.end()) return false;
  }
  return any;
}

bool UpstreamPool::RefusesUnrunnableTools(const std::string& model) const {
  return std::any_of(upstreams_.begin(), upstreams_.end(),
                     [&](const auto& u) { return u->Serves(model) && u->spec.refuse_unrunnable_tools; });
}

}  // namespace corral::proxy
