#include "services/ratelimiter/limit_spec.h"

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace corral::ratelimiter {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

const char* LimitKindName(LimitKind kind) { return kind == LimitKind::kConcurrency ? "concurrency" : "rate"; }

absl::Status NormalizeLimitSpec(LimitSpec& spec) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("limit '", spec.name, "': ", why));
  };
  if (!ValidName(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit name '", spec.name, "' is invalid: use 1-64 characters from [A-Za-z0-9_-]"));
  }
  if (spec.kind == LimitKind::kConcurrency) {
    if (spec.permits < 1 || spec.permits > 1'000'000'000) return bad("permits must be between 1 and 1e9");
    if (spec.rate_per_s != 0 || spec.burst != 0) return bad("rate_per_s and burst belong to rate limits");
  } else {
    if (!(spec.rate_per_s > 0) || !std::isfinite(spec.rate_per_s) || spec.rate_per_s > 1e9) {
      return bad("rate_per_s must be a number above 0 and at most 1e9");
    }
    if (spec.permits != 0) return bad("permits belongs to concurrency limits; rate limits take rate_per_s and burst");
    if (spec.burst == 0) spec.burst = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(spec.rate_per_s)));
    if (spec.burst < 1 || spec.burst > 1'000'000'000) return bad("burst must be between 1 and 1e9");
  }
  if (spec.keyed()) {
    if (spec.key_template.size() < 3 || spec.key_template.front() != '{' || spec.key_template.back() != '}') {
      return bad(absl::StrCat("key template '", spec.key_template, "' must look like {language}"));
    }
  }
  if (spec.instance_idle_ttl <= absl::ZeroDuration() || spec.instance_idle_ttl > absl::Hours(24 * 7)) {
    return bad("instance_idle_ttl must be above 0 and at most 7 days");
  }
  return absl::OkStatus();
}

absl::Status ValidateKey(const std::string& key) {
  if (key.empty() || key.size() > 128) {
    return absl::InvalidArgumentError("key must be 1-128 characters");
  }
  for (char c : key) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError("key must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LimitSpec>> ParseLimitsYaml(const YAML::Node& node) {
  if (node.IsNull()) return std::vector<LimitSpec>{};
  if (!node.IsSequence()) {
    return absl::InvalidArgumentError(
        "expected a list of limits like [{name: code_exec, kind: concurrency, permits: 64}]");
  }
  std::vector<LimitSpec> specs;
  std::set<std::string> names;
  for (const YAML::Node& item : node) {
    const int line = item.Mark().line + 1;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("limit at line ", line, ": ", why));
    };
    if (!item.IsMap()) return bad("expected a mapping with name, kind and sizes");
    LimitSpec spec;
    bool has_kind = false;
    for (auto it = item.begin(); it != item.end(); ++it) {
      const std::string field = it->first.as<std::string>();
      const YAML::Node v = it->second;
      if (!v.IsScalar()) return bad(absl::StrCat("field '", field, "' must be a single value"));
      try {
        if (field == "name") {
          std::string full = v.Scalar();
          size_t slash = full.find('/');
          spec.name = full.substr(0, slash);
          if (slash != std::string::npos) spec.key_template = full.substr(slash + 1);
        } else if (field == "kind") {
          has_kind = true;
          if (v.Scalar() == "concurrency") {
            spec.kind = LimitKind::kConcurrency;
          } else if (v.Scalar() == "rate") {
            spec.kind = LimitKind::kRate;
          } else {
            return bad(absl::StrCat("kind '", v.Scalar(), "' is not concurrency or rate"));
          }
        } else if (field == "permits") {
          spec.permits = v.as<int64_t>();
        } else if (field == "rate_per_s") {
          spec.rate_per_s = v.as<double>();
        } else if (field == "burst") {
          spec.burst = v.as<int64_t>();
        } else if (field == "instance_idle_ttl") {
          if (!absl::ParseDuration(v.Scalar(), &spec.instance_idle_ttl)) {
            return bad(absl::StrCat("instance_idle_ttl '", v.Scalar(), "' is not a duration like 10m"));
          }
        } else {
          return bad(absl::StrCat("unknown field '", field,
                                  "'; known: name, kind, permits, rate_per_s, burst, instance_idle_ttl"));
        }
      } catch (const YAML::Exception&) {
        return bad(absl::StrCat("field '", field, "' has the wrong type: '", v.Scalar(), "'"));
      }
    }
    if (!has_kind) return bad("missing kind (concurrency or rate)");
    if (absl::Status s = NormalizeLimitSpec(spec); !s.ok()) return bad(s.message());
    if (!names.insert(spec.name).second) return bad(absl::StrCat("duplicate limit name '", spec.name, "'"));
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace corral::ratelimiter
