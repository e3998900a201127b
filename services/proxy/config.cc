#include "services/proxy/config.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/proxy/api_registry.h"
#include "yaml-cpp/yaml.h"

namespace corral::proxy {
namespace {

// A quota block: {requests, tokens, concurrency, key}, each a ratelimiter limit's name.
absl::StatusOr<QuotaSpec> ParseQuota(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap())
    return absl::InvalidArgumentError(absl::StrCat(where, " must be a map of {requests, tokens, concurrency, key}"));
  QuotaSpec q;
  for (const auto& kv : node) {
    const std::string field = kv.first.as<std::string>();
    std::string* out = field == "requests"      ? &q.requests
                       : field == "tokens"      ? &q.tokens
                       : field == "concurrency" ? &q.concurrency
                       : field == "key"         ? &q.key
                                                : nullptr;
    if (out == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown key '", field, "' (requests, tokens, concurrency, key)"));
    }
    if (!kv.second.IsScalar()) return absl::InvalidArgumentError(absl::StrCat(where, ".", field, " must be a string"));
    *out = kv.second.as<std::string>();
    const bool name_ok = out->size() <= 64 && std::all_of(out->begin(), out->end(), [](char ch) {
                           return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
                         });
    if (out != &q.key && !name_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".", field, ": '", *out, "' is not a limit name (1-64 characters from [A-Za-z0-9_-])"));
    }
  }
  if (q.empty())
    return absl::InvalidArgumentError(absl::StrCat(where, " names no limit (requests, tokens or concurrency)"));
  return q;
}

// One item of `upstreams`: a URL, or a map with its url and the rest.
absl::StatusOr<UpstreamSpec> ParseUpstream(const YAML::Node& item) {
  const std::string url = item.IsScalar() ? item.as<std::string>() : item["url"].as<std::string>("");
  CORRAL_ASSIGN_OR_RETURN(UpstreamSpec spec, ParseUpstreamUrl(url));
  if (item.IsMap()) {
    if (item["name"]) spec.name = item["name"].as<std::string>();
    if (item["weight"]) spec.weight = item["weight"].as<int>();
    if (item["models"]) spec.models = item["models"].as<std::vector<std::string>>();
    if (item["quota"]) {
      CORRAL_ASSIGN_OR_RETURN(spec.quota, ParseQuota(item["quota"], "quota of " + spec.name));
    }
    if (item["unrunnable_tools"]) {
      const std::string v = item["unrunnable_tools"].as<std::string>();
      if (v != "refuse" && v != "leave_out") {
        return absl::InvalidArgumentError(
            absl::StrCat("unrunnable_tools of ", spec.name, " must be refuse or leave_out, not '", v, "'"));
      }
      spec.refuse_unrunnable_tools = v == "refuse";
    }
    if (item["dialects"]) {
      spec.dialects = item["dialects"].as<std::vector<std::string>>();
      for (const std::string& d : spec.dialects) {
        if (FindNativeApi(d) == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("dialects of ", spec.name, ": '", d, "' is not an agent API (", NativeApiNames(), ")"));
        }
      }
    }
  }
  if (spec.weight < 1 || spec.weight > 100) return absl::InvalidArgumentError("weight must be 1-100");
  return spec;
}

}  // namespace

bool Config::has_quotas() const {
  if (!model_quotas.empty()) return true;
  for (const UpstreamSpec& u : upstreams) {
    if (!u.quota.empty()) return true;
  }
  return false;
}

void RegisterConfig(ConfigSchema& schema, Config* c) {
  c->server.grpc_listen = "127.0.0.1:7600";
  c->server.metrics_listen = "127.0.0.1:9600";
  RegisterServerFlags(schema, &c->server);
  schema.String("http_listen", &c->http_listen,
                "HOST:PORT of the OpenAI-compatible HTTP endpoint (port 0: the kernel chooses)");
  schema.String("advertise_url", &c->advertise_url,
                "base URL agents reach this proxy at, returned by OpenSession (default: http://<http_listen>/v1)");
  schema.Int("http_threads", &c->http_threads, "HTTP I/O threads", 1, 64);
  schema.Int("max_body_bytes", &c->max_body_bytes, "largest request body accepted (413 beyond)", 1024,
             int64_t{1} << 30);
  schema.Int("max_connections", &c->max_connections, "open HTTP connections accepted (503 beyond)", 1, 1000000);
  schema.Duration("header_timeout", &c->http_limits.header_timeout, "time to read a request's header (slowloris)",
                  absl::Milliseconds(100), absl::Minutes(10));
  schema.StringList("upstream", &c->upstream_urls, "an inference backend, http://HOST:PORT (repeatable)");
  schema.String("default_model", &c->default_model,
                "model of a session (and of a call) that names none; unset: the one model the upstreams serve "
                "when they serve exactly one (GET /v1/models)");
  schema.Custom(
      "upstreams", "list", "[]",
      "inference backends: a YAML list of {name, url, models: [..], weight, quota: {requests, tokens, "
      "concurrency, key}, dialects: [responses, messages], unrunnable_tools: leave_out|refuse} (a quota names "
      "ratelimiter limits; dialects: the agent APIs it serves itself, passed through untranslated; "
      "unrunnable_tools: what a translated call offering tools it cannot run gets)",
      [c](const YAML::Node& node) -> absl::Status {
        if (!node.IsSequence()) return absl::InvalidArgumentError("upstreams must be a list");
        for (const auto& item : node) {
          CORRAL_ASSIGN_OR_RETURN(UpstreamSpec spec, ParseUpstream(item));
          c->upstreams.push_back(std::move(spec));
        }
        return absl::OkStatus();
      });
  schema.Custom("model_quotas", "map", "{}",
                "quotas per model, across every upstream serving it: {MODEL: {requests, tokens, concurrency, key}}",
                [c](const YAML::Node& node) -> absl::Status {
                  if (!node.IsMap()) return absl::InvalidArgumentError("model_quotas must be a map of model → quota");
                  for (const auto& kv : node) {
                    const std::string model = kv.first.as<std::string>();
                    CORRAL_ASSIGN_OR_RETURN(QuotaSpec q, ParseQuota(kv.second, "model_quotas." + model));
                    c->model_quotas[model] = std::move(q);
                  }
                  return absl::OkStatus();
                });
  schema.String(
      "ratelimiter", &c->ratelimiter,
      "HOST:PORT of corral-ratelimiter, which keeps the quotas every proxy replica shares (required by a quota)");
  schema.Bool("limiter_fail_open", &c->limiter_fail_open,
              "relay calls without their quotas while the ratelimiter is unreachable (default: fail closed, HTTP 503)");
  schema.Duration("quota_max_wait", &c->quota.max_wait,
                  "longest a call waits for its quotas, an upstream's 429s included (then HTTP 429 to the agent)",
                  absl::ZeroDuration(), absl::Hours(1));
  schema.Int("quota_default_max_tokens", &c->quota.default_max_tokens,
             "a token quota's up-front charge for the completion when a request sets no max_tokens", 1, 1 << 24);
  schema.String("journal", &c->journal,
                "SQLite file recording sessions and calls (WAL), with its record log in <journal>-log.N beside it");
  schema.Bool("journal_fsync", &c->journal_fsync,
              "commit every change with an fsync before answering, so recorded calls survive a machine crash too "
              "(by default they survive the proxy being killed: in the record log, flushed by the OS)");
  schema.Bool("record", &c->record,
              "record every call into its session's trajectory (and the journal); false: a gateway that relays, "
              "counts and meters calls but keeps no trajectory (GetTrajectory is refused; the scheduler needs it)");
  schema.Int("max_sessions", &c->max_sessions, "open sessions held at once", 1, 10000000);
  schema.Duration("session_ttl", &c->sessions.default_ttl, "lifetime of a session whose policy sets none",
                  absl::Seconds(1), absl::Hours(24 * 30));
  schema.Duration("max_session_ttl", &c->sessions.max_ttl, "longest TTL a policy may ask for", absl::Seconds(1),
                  absl::Hours(24 * 30));
  schema.Duration("trajectory_retention", &c->sessions.default_retention,
                  "how long a closed, unacknowledged trajectory is kept", absl::ZeroDuration(), absl::Hours(24 * 30));
  schema.Duration("connect_timeout", &c->relay.connect_timeout, "to connect to an upstream", absl::Milliseconds(10),
                  absl::Minutes(1));
  schema.Duration("first_byte_timeout", &c->relay.first_byte_timeout,
                  "for an upstream's response header (queueing and prefill)", absl::Milliseconds(10), absl::Hours(1));
  schema.Duration("idle_timeout", &c->relay.idle_timeout, "between pieces of an upstream's response",
                  absl::Milliseconds(10), absl::Hours(1));
  schema.Duration("keepalive_interval", &c->relay.keepalive_interval,
                  "SSE comment keepalives to a streaming agent while the upstream has not answered",
                  absl::Milliseconds(50), absl::Minutes(5));
  schema.Int("max_attempts", &c->max_attempts, "upstream attempts per call (retries only before the first byte)", 1,
             10);
  schema.Duration("health_interval", &c->health_interval, "active upstream health checks (GET /health)",
                  absl::Milliseconds(100), absl::Minutes(10));
  schema.Int("upstream_panic_threshold", &c->breaker.panic_threshold_percent,
             "percent of the upstreams serving a model that must be healthy for health checks to decide; below it "
             "calls go to all of them (with one upstream: whenever it is unhealthy); 0 never",
             0, 100);
}

absl::Status ValidateConfig(Config& c) {
  CORRAL_RETURN_IF_ERROR(ValidateServerConfig(c.server));
  if (auto split = SplitHostPort(c.http_listen); !split.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("http_listen: ", split.status().message()));
  }
  for (const auto& url : c.upstream_urls) {
    auto spec = ParseUpstreamUrl(url);
    if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("upstream: ", spec.status().message()));
    c.upstreams.push_back(*std::move(spec));
  }
  if (c.upstreams.empty()) return absl::InvalidArgumentError("at least one upstream is required (--upstream URL)");
  if (c.has_quotas() && c.ratelimiter.empty()) {
    return absl::InvalidArgumentError("a quota is configured: ratelimiter must name corral-ratelimiter (HOST:PORT)");
  }
  if (!c.ratelimiter.empty()) {
    if (auto split = SplitHostPort(c.ratelimiter); !split.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("ratelimiter: ", split.status().message()));
    }
  }
  if (c.journal.empty()) return absl::InvalidArgumentError("journal must name a file");
  if (c.sessions.default_ttl > c.sessions.max_ttl) {
    return absl::InvalidArgumentError("session_ttl must not be above max_session_ttl");
  }
  c.sessions.max_sessions = c.max_sessions;
  c.relay.max_attempts = static_cast<int>(c.max_attempts);
  c.http_limits.max_body_bytes = static_cast<size_t>(c.max_body_bytes);
  c.http_limits.max_connections = c.max_connections;
  return absl::OkStatus();
}

}  // namespace corral::proxy
