// What a limit is: a concurrency semaphore or a token bucket, optionally a keyed template whose instances
// appear on first use. Plain values plus validation and the YAML form used by the config file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace YAML {
class Node;
}

namespace corral::ratelimiter {

enum class LimitKind { kConcurrency, kRate };
enum class LimitSource { kConfig, kRpc };

struct LimitSpec {
  std::string name;  // [A-Za-z0-9_-]{1,64}
  LimitKind kind = LimitKind::kConcurrency;
  int64_t permits = 0;       // concurrency: >= 1
  double rate_per_s = 0;     // rate: > 0
  int64_t burst = 0;         // rate: >= 1 (0 → max(1, ceil(rate_per_s)))
  std::string key_template;  // "{language}" makes it a keyed template; empty: a single instance
  absl::Duration instance_idle_ttl = absl::Minutes(10);
  LimitSource source = LimitSource::kConfig;

  bool keyed() const { return !key_template.empty(); }
  // Most permits one request may ask for: permits (concurrency) or burst (rate).
  int64_t capacity() const { return kind == LimitKind::kConcurrency ? permits : burst; }
};

// Fills defaults (burst) and checks every field. INVALID_ARGUMENT saying which field and why.
absl::Status NormalizeLimitSpec(LimitSpec& spec);

// A request's instance key: 1..128 printable ASCII characters. INVALID_ARGUMENT otherwise.
absl::Status ValidateKey(const std::string& key);

// Parses the YAML `limits:` list: [{name: code_exec/{language}, kind: concurrency, permits: 64}, ...].
// `name: a/{k}` is the template form. INVALID_ARGUMENT naming the entry (and line) on any error,
// including duplicate names.
absl::StatusOr<std::vector<LimitSpec>> ParseLimitsYaml(const YAML::Node& node);

const char* LimitKindName(LimitKind kind);

}  // namespace corral::ratelimiter
