#include "services/sandbox_api/e2b/e2b_control.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/http/connect_codec.h"
#include "libs/http/url.h"
#include "services/sandbox_api/e2b/e2b_templates.h"
#include "services/sandbox_api/e2b/template_steps.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr char kTemplateLabel[] = "e2b.template";
constexpr char kApiLabel[] = "corral.api";
constexpr size_t kMaxFork = 64;
// A create waits this long for room on a host, and answers within kCreateAnswer either way: under the SDK's
// default request timeout (60 s), so that no client has given up on a create that then makes a sandbox.
constexpr absl::Duration kCreateWait = absl::Seconds(40);
constexpr absl::Duration kCreateAnswer = absl::Seconds(50);

E2bAnswer SandboxNotFound(const std::string& id) {
  return E2bError(404, absl::StrCat("sandbox \"", id, "\" not found"));
}

// A string map field (metadata, envVars); INVALID_ARGUMENT naming it otherwise.
absl::Status StringMap(const json::object& body, const char* field, std::map<std::string, std::string>* out) {
  const json::value* v = body.if_contains(field);
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (!v->is_object()) return absl::InvalidArgumentError(absl::StrCat(field, " must be an object of strings"));
  for (const auto& [k, value] : v->as_object()) {
    if (!value.is_string())
      return absl::InvalidArgumentError(absl::StrCat(field, ".", std::string(k), " must be a string"));
    (*out)[std::string(k)] = std::string(value.as_string());
  }
  return absl::OkStatus();
}

// `timeout` in seconds: absent → `fallback`; otherwise 1..max.
absl::StatusOr<absl::Duration> Timeout(const json::object& body, absl::Duration fallback, absl::Duration max) {
  const json::value* v = body.if_contains("timeout");
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_int64() && !v->is_uint64()) return absl::InvalidArgumentError("timeout must be a whole number of seconds");
  const int64_t seconds = v->to_number<int64_t>();
  if (seconds < 1 || absl::Seconds(seconds) > max) {
    return absl::InvalidArgumentError(absl::StrCat("timeout must be 1-", absl::ToInt64Seconds(max), " seconds"));
  }
  return absl::Seconds(seconds);
}

std::string TemplateOf(const v1::SandboxLease& lease) {
  auto it = lease.labels().find(kTemplateLabel);
  return it == lease.labels().end() ? "base" : it->second;
}

// `metadata` as the SDK sends it for list: form-encoded pairs whose keys and values are percent-encoded again.
absl::StatusOr<std::map<std::string, std::string>> MetadataFilter(const std::string& text) {
  std::map<std::string, std::string> out;
  for (absl::string_view pair : absl::StrSplit(text, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    auto k = http::PercentDecode(kv.first, true);
    auto v = http::PercentDecode(kv.second, true);
    if (!k.ok() || !v.ok()) return absl::InvalidArgumentError("metadata: malformed encoding");
    auto k2 = http::PercentDecode(*k, false);
    auto v2 = http::PercentDecode(*v, false);
    if (!k2.ok() || !v2.ok()) return absl::InvalidArgumentError("metadata: malformed encoding");
    out[*k2] = *v2;
  }
  return out;
}

}  // namespace

bool E2bControlPlane::Serves(const std::string& path) {
  return absl::StartsWith(path, "/v2/sandboxes") || absl::StartsWith(path, "/sandboxes") || E2bTemplates::Serves(path);
}

asio::awaitable<E2bAnswer> E2bControlPlane::Handle(E2bRequest r) {
  if (E2bTemplates::Serves(r.path)) {
    if (templates_ == nullptr) co_return E2bError(400, "templates are not served here");
    co_return co_await templates_->Handle(std::move(r));
  }
  auto owner = auth_->Owner(r.api_key);
  if (!owner.ok()) co_return E2bError(401, std::string(owner.status().message()));
  absl::string_view path = r.path;
  if (path == "/v2/sandboxes" || path == "/v2/sandboxes/") {
    if (r.method == "POST") co_return co_await Create(*std::move(owner), std::move(r.body));
    if (r.method == "GET") co_return co_await List(*std::move(owner), std::move(r.query));
    co_return E2bError(405, "method not allowed");
  }
  // /sandboxes/{id}[/action] and /v2/sandboxes/{id}/connect
  if (!absl::ConsumePrefix(&path, "/v2/sandboxes/")) absl::ConsumePrefix(&path, "/sandboxes/");
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  if (parts.empty() || parts.size() > 2 || parts[0].empty()) co_return E2bError(404, "no such route");
  std::string action = parts.size() == 2 ? parts[1] : "";
  if (r.method == "GET" && action == "metrics") co_return co_await Metrics(*std::move(owner), parts[0], r.query);
  if (r.method == "GET" && action == "usage") co_return co_await Usage(*std::move(owner), parts[0]);
  co_return co_await OnSandbox(*std::move(owner), std::move(r.method), parts[0], std::move(action), std::move(r.body));
}

asio::awaitable<E2bAnswer> E2bControlPlane::Create(std::string owner, std::string body_text) {
  auto body = E2bBody(body_text);
  if (!body.ok()) co_return E2bFromStatus(body.status());
  std::string template_id = "base";
  if (const json::value* t = body->if_contains("templateID"); t != nullptr && !t->is_null()) {
    if (!t->is_string() || t->as_string().empty()) co_return E2bError(400, "templateID must be a template name");
    template_id = std::string(t->as_string());
  }
  auto timeout = Timeout(*body, options_.default_timeout, options_.max_timeout);
  if (!timeout.ok()) co_return E2bFromStatus(timeout.status());
  std::map<std::string, std::string> metadata, envs;
  if (absl::Status s = StringMap(*body, "metadata", &metadata); !s.ok()) co_return E2bFromStatus(s);
  if (absl::Status s = StringMap(*body, "envVars", &envs); !s.ok()) co_return E2bFromStatus(s);
  bool internet = false;
  if (const json::value* a = body->if_contains("allow_internet_access"); a != nullptr && a->is_bool()) {
    internet = a->as_bool();
  }

  v1::LeaseSandboxRequest request;
  v1::EnvironmentSpec* env = request.mutable_environment();
  // "base" is a plain sandbox, and so are the code interpreter's templates (its kernel is Corral's, run in any
  // sandbox); any other template is one the owner built, or else names an image the hosts hold or can pull, and
  // so may the image metadata key for the default template.
  std::optional<v1::TemplateBuild> build;
  if (!IsPlainTemplate(template_id) && templates_ != nullptr) {
    auto resolved = co_await templates_->Resolve(owner, template_id);
    if (!resolved.ok()) co_return E2bFromStatus(resolved.status());
    build = *std::move(resolved);
  }
  if (build) {
    *env = build->environment();
  } else if (!IsPlainTemplate(template_id)) {
    env->set_image(template_id);
  }
  if (auto named = metadata.find(options_.image_metadata_key);
      template_id == "base" && !options_.image_metadata_key.empty() && named != metadata.end()) {
    const std::string& image = named->second;
    if (image.empty() || image.size() > 512 || absl::c_any_of(image, [](char ch) { return ch <= ' ' || ch == 0x7f; })) {
      co_return E2bError(400, absl::StrCat("metadata '", options_.image_metadata_key,
                                           "' must name an image (no spaces, at most 512 characters)"));
    }
    env->set_image(image);
  }
  // The sandbox's own variables, not its template's environment: it was built without them.
  if (build) {
    for (auto& [k, v] : TemplateEnv(*build)) (*request.mutable_env())[k] = v;
  }
  for (auto& [k, v] : envs) (*request.mutable_env())[k] = v;
  if (!build) AddE2bDefaults(options_, env);
  env->set_network_policy(internet ? v1::NETWORK_POLICY_OPEN : v1::NETWORK_POLICY_NONE);
  request.set_owner(owner);
  ToProto(*timeout, request.mutable_ttl());
  (*request.mutable_labels())[kApiLabel] = "e2b";
  (*request.mutable_labels())[kTemplateLabel] = template_id;
  request.mutable_metadata()->insert(metadata.begin(), metadata.end());
  // What a missing image is called in the answer: the template, or the metadata that named it.
  const std::string what =
      env->image().empty() || env->image() == template_id
          ? absl::StrCat("template '", template_id, "'")
          : absl::StrCat("image '", env->image(), "' (metadata '", options_.image_metadata_key, "')");
  ToProto(kCreateWait, request.mutable_wait());
  auto lease = co_await leases_->Lease(std::move(request), clock_->Now() + kCreateAnswer);
  if (!lease.ok()) {
    if (lease.status().code() == absl::StatusCode::kNotFound ||
        absl::StrContains(lease.status().message(), "pulling image")) {
      co_return E2bError(404, absl::StrCat(what, " not found: ", lease.status().message()));
    }
    co_return E2bFromStatus(lease.status());
  }
  if (build) {
    if (absl::Status started = co_await templates_->Start(*lease, *build); !started.ok()) {
      (void)co_await leases_->Release(lease->lease_id(), owner);
      co_return E2bFromStatus(started);
    }
  }
  if (on_leased_) on_leased_(*lease);
  co_return E2bAnswer{201, json::serialize(SandboxJson(*lease)), {}};
}

boost::json::object E2bControlPlane::SandboxJson(const v1::SandboxLease& lease) const {
  const std::string tmpl = TemplateOf(lease);
  json::object o;
  o["sandboxID"] = JsonText(lease.lease_id());
  o["templateID"] = JsonText(tmpl);
  o["clientID"] = "corral";
  o["alias"] = JsonText(tmpl);
  o["envdVersion"] = JsonText(options_.envd_version);
  o["envdAccessToken"] = JsonText(auth_->AccessToken(lease.owner(), lease.lease_id()));
  // The code interpreter's calls present this one (E2B-Traffic-Access-Token): the sandbox's own.
  o["trafficAccessToken"] = JsonText(auth_->AccessToken(lease.owner(), lease.lease_id()));
  o["domain"] = nullptr;
  return o;
}

boost::json::object E2bControlPlane::InfoJson(const v1::SandboxLease& lease) const {
  json::object o = SandboxJson(lease);
  o["startedAt"] = JsonText(E2bTime(FromProto(lease.create_time())));
  o["endAt"] = JsonText(E2bTime(FromProto(lease.expire_time())));
  o["state"] = lease.paused() ? "paused" : "running";
  json::object metadata;
  for (const auto& [k, v] : lease.metadata()) metadata[k] = JsonText(v);
  o["metadata"] = std::move(metadata);
  o["lifecycle"] = json::object{{"onTimeout", "kill"}, {"autoResume", false}};
  o["volumeMounts"] = json::array();
  return o;
}

asio::awaitable<E2bAnswer> E2bControlPlane::List(std::string owner, std::map<std::string, std::string> query) {
  std::map<std::string, std::string> wanted;
  if (auto it = query.find("metadata"); it != query.end()) {
    auto filter = MetadataFilter(it->second);
    if (!filter.ok()) co_return E2bFromStatus(filter.status());
    wanted = *std::move(filter);
  }
  size_t limit = 100;
  if (auto it = query.find("limit"); it != query.end()) {
    if (!absl::SimpleAtoi(it->second, &limit) || limit < 1 || limit > 1000)
      co_return E2bError(400, "limit must be 1-1000");
  }
  // state=running,paused (comma-separated, as the SDK sends it); absent: both.
  bool running = true, paused = true;
  if (auto it = query.find("state"); it != query.end()) {
    const std::vector<std::string> states = absl::StrSplit(it->second, ',');
    running = absl::c_linear_search(states, "running");
    paused = absl::c_linear_search(states, "paused");
  }
  const std::string after = query.count("nextToken") ? query["nextToken"] : "";
  const std::string template_id = query.count("template") ? query["template"] : "";
  auto leases = co_await leases_->List(owner);
  if (!leases.ok()) co_return E2bFromStatus(leases.status());
  json::array page;
  std::string next;
  for (const v1::SandboxLease& lease : *leases) {
    if (!(lease.paused() ? paused : running) || lease.lease_id() <= after) continue;
    auto api = lease.labels().find(kApiLabel);
    if (api == lease.labels().end() || api->second != "e2b") continue;  // the /run_code leases are not E2B's
    if (!template_id.empty() && TemplateOf(lease) != template_id) continue;
    if (!std::all_of(wanted.begin(), wanted.end(), [&](const auto& kv) {
          auto m = lease.metadata().find(kv.first);
          return m != lease.metadata().end() && m->second == kv.second;
        })) {
      continue;
    }
    if (page.size() == limit) {
      next = page.back().as_object().at("sandboxID").as_string().c_str();
      break;
    }
    json::object item = InfoJson(lease);
    item.erase("envdAccessToken");
    item.erase("lifecycle");
    page.push_back(std::move(item));
  }
  E2bAnswer answer{200, json::serialize(page), {}};
  if (!next.empty()) answer.headers.emplace_back("X-Next-Token", next);
  co_return answer;
}

asio::awaitable<E2bAnswer> E2bControlPlane::OnSandbox(std::string owner, std::string method, std::string id,
                                                      std::string action, std::string body_text) {
  auto body = E2bBody(body_text);
  if (!body.ok()) co_return E2bFromStatus(body.status());
  if (method == "GET" && action.empty()) {
    auto lease = co_await leases_->Get(id, owner);
    if (!lease.ok())
      co_return lease.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                     : E2bFromStatus(lease.status());
    co_return E2bAnswer{200, json::serialize(InfoJson(*lease)), {}};
  }
  if (method == "DELETE" && action.empty()) {
    absl::Status s = co_await leases_->Release(id, owner);
    if (s.code() == absl::StatusCode::kNotFound) co_return SandboxNotFound(id);
    if (!s.ok()) co_return E2bFromStatus(s);
    if (on_killed_) on_killed_(id);
    co_return E2bAnswer{204, "", {}};
  }
  if (method == "POST" && action == "timeout") {
    auto timeout = Timeout(*body, absl::ZeroDuration(), options_.max_timeout);
    if (!timeout.ok() || *timeout == absl::ZeroDuration()) co_return E2bError(400, "timeout (seconds) is required");
    auto lease = co_await leases_->Renew(id, owner, *timeout);
    if (!lease.ok())
      co_return lease.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                     : E2bFromStatus(lease.status());
    co_return E2bAnswer{204, "", {}};
  }
  if (method == "POST" && (action == "connect" || action == "resume")) {
    auto timeout = Timeout(*body, absl::ZeroDuration(), options_.max_timeout);
    if (!timeout.ok()) co_return E2bFromStatus(timeout.status());
    co_return co_await Connect(std::move(owner), std::move(id), *timeout);
  }
  if (method == "POST" && action == "pause") co_return co_await Pause(std::move(owner), std::move(id));
  if (method == "POST" && action == "refreshes") {
    // {duration} in seconds (0-3600; absent or 0: the default timeout), as a renewal.
    absl::Duration ttl = options_.default_timeout;
    if (const json::value* d = body->if_contains("duration"); d != nullptr && !d->is_null()) {
      if (!d->is_int64() || d->as_int64() < 0 || d->as_int64() > 3600)
        co_return E2bError(400, "duration must be 0-3600");
      if (d->as_int64() > 0) ttl = absl::Seconds(d->as_int64());
    }
    auto lease = co_await leases_->Renew(id, owner, ttl);
    if (!lease.ok())
      co_return lease.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                     : E2bFromStatus(lease.status());
    co_return E2bAnswer{204, "", {}};
  }
  if (method == "POST" && action == "fork") {
    uint32_t count = 1;
    if (const json::value* c = body->if_contains("count"); c != nullptr && !c->is_null()) {
      if (!c->is_int64() || c->as_int64() < 1 || static_cast<size_t>(c->as_int64()) > kMaxFork) {
        co_return E2bError(400, absl::StrCat("count must be 1-", kMaxFork));
      }
      count = static_cast<uint32_t>(c->as_int64());
    }
    auto timeout = Timeout(*body, absl::Seconds(15), options_.max_timeout);  // E2B's default for forks
    if (!timeout.ok()) co_return E2bFromStatus(timeout.status());
    v1::ForkLeaseRequest fork;
    fork.set_lease_id(id);
    fork.set_owner(owner);
    fork.set_count(count);
    ToProto(*timeout, fork.mutable_ttl());
    auto forked = co_await leases_->Fork(std::move(fork));
    if (!forked.ok())
      co_return forked.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                      : E2bFromStatus(forked.status());
    json::array out;
    for (const v1::SandboxLease& child : forked->leases()) {
      if (on_leased_) on_leased_(child);
      out.push_back(json::object{{"sandbox", SandboxJson(child)}});
    }
    while (out.size() < count) {
      out.push_back(json::object{{"error", json::object{{"code", 429}, {"message", "the host had no room for it"}}}});
    }
    co_return E2bAnswer{201, json::serialize(out), {}};
  }
  if (action == "snapshots") {
    co_return E2bError(400, "snapshots are not supported: fork copies a sandbox, pause keeps one as it is");
  }
  if (action == "logs") co_return E2bError(400, "logs are not supported by Corral's E2B API");
  // Not 404: the SDK would read {"code": 404} as "no such sandbox".
  co_return E2bError(400, absl::StrCat("no such route: ", method, " ", action));
}

asio::awaitable<E2bAnswer> E2bControlPlane::Pause(std::string owner, std::string id) {
  auto lease = co_await leases_->Get(id, owner);
  if (!lease.ok())
    co_return lease.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                   : E2bFromStatus(lease.status());
  if (lease->paused()) co_return E2bError(409, absl::StrCat("sandbox \"", id, "\" is already paused"));
  auto paused = co_await leases_->SetPaused(id, owner, true, absl::ZeroDuration());
  if (!paused.ok())
    co_return paused.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                    : E2bFromStatus(paused.status());
  if (on_killed_) on_killed_(id);  // the in-sandbox API forgets it: a call now finds it paused
  co_return E2bAnswer{204, "", {}};
}

asio::awaitable<E2bAnswer> E2bControlPlane::Connect(std::string owner, std::string id, absl::Duration timeout) {
  auto lease = co_await leases_->Get(id, owner);
  if (lease.ok() && lease->paused()) {
    lease = co_await leases_->SetPaused(id, owner, false, timeout);
    if (lease.ok()) {
      if (on_leased_) on_leased_(*lease);
      co_return E2bAnswer{201, json::serialize(SandboxJson(*lease)), {}};
    }
  } else if (lease.ok() && timeout > absl::ZeroDuration()) {
    lease = co_await leases_->Renew(id, owner, timeout);
  }
  if (!lease.ok())
    co_return lease.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                   : E2bFromStatus(lease.status());
  co_return E2bAnswer{200, json::serialize(SandboxJson(*lease)), {}};
}

asio::awaitable<std::variant<E2bControlPlane::Leased, E2bAnswer>> E2bControlPlane::FindLeased(std::string owner,
                                                                                              std::string id) {
  using Out = std::variant<Leased, E2bAnswer>;
  auto lease = co_await leases_->Get(id, owner);
  if (!lease.ok()) {
    co_return Out(lease.status().code() == absl::StatusCode::kNotFound ? SandboxNotFound(id)
                                                                       : E2bFromStatus(lease.status()));
  }
  auto host = leases_->Host(*lease);
  if (!host.ok()) co_return Out(E2bFromStatus(host.status()));
  if (*host == nullptr) co_return Out(E2bError(500, absl::StrCat("sandbox ", id, ": no client for its host")));
  co_return Out(Leased{*std::move(lease), *std::move(host)});
}

}  // namespace corral::sandbox_api
