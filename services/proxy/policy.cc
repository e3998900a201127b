#include "services/proxy/policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/json/parse.hpp"
#include "boost/json/serialize.hpp"
#include "libs/trajectory/roles.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

bool Allowed(const v1::SessionPolicy& p, const std::string& model) {
  return p.allowed_models().empty() ||
         std::find(p.allowed_models().begin(), p.allowed_models().end(), model) != p.allowed_models().end();
}

bool Truthy(const json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  return v != nullptr && ((v->is_bool() && v->as_bool()) || (v->is_int64() && v->as_int64() > 0));
}

PolicyOutcome Refuse(Refusal r, std::string message) {
  PolicyOutcome out;
  out.refusal = r;
  out.message = std::move(message);
  return out;
}

// What `model` is sent upstream as: an alias's target, the "*" alias's for a model not allowed, else itself.
std::string UpstreamModel(const v1::SessionPolicy& p, const std::string& model) {
  if (auto it = p.model_aliases().find(model); it != p.model_aliases().end()) return it->second;
  if (auto star = p.model_aliases().find("*"); star != p.model_aliases().end() && !Allowed(p, model)) {
    return star->second;
  }
  return model;
}

// What is wrong with the request's shape, if anything (a 400 for the agent).
std::optional<std::string> MalformedRequest(bool chat, const json::object& body) {
  if (chat) {
    auto* msgs = body.if_contains("messages");
    if (msgs == nullptr || !msgs->is_array() || msgs->as_array().empty()) {
      return std::string("'messages' must be a non-empty array");
    }
    for (const auto& m : msgs->as_array()) {
      if (!m.is_object() || !m.as_object().contains("role") || !m.as_object().at("role").is_string()) {
        return std::string("every message must be an object with a string 'role'");
      }
    }
  } else if (auto* prompt = body.if_contains("prompt"); prompt == nullptr || !prompt->is_string()) {
    return std::string("'prompt' must be a string");
  }
  if (auto* s = body.if_contains("stream"); s != nullptr && !s->is_bool() && !s->is_null()) {
    return std::string("'stream' must be a boolean");
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (auto* v = body.if_contains(key); v != nullptr && !v->is_null() && (!v->is_int64() || v->as_int64() < 1)) {
      return absl::StrCat("'", key, "' must be a positive integer");
    }
  }
  return std::nullopt;
}

// Why the session's budget refuses another call, if it does.
std::optional<std::string> BudgetSpent(const v1::SessionBudget& b, const BudgetUse& used) {
  if (b.max_calls() > 0 && used.calls >= b.max_calls()) {
    return absl::StrCat("budget exhausted: max_calls=", b.max_calls());
  }
  const uint64_t total = used.prompt_tokens + used.completion_tokens;
  if ((b.max_prompt_tokens() > 0 && used.prompt_tokens >= b.max_prompt_tokens()) ||
      (b.max_completion_tokens() > 0 && used.completion_tokens >= b.max_completion_tokens()) ||
      (b.max_total_tokens() > 0 && total >= b.max_total_tokens())) {
    return std::string("budget exhausted: token budget used up");
  }
  return std::nullopt;
}

// Lowers max_tokens (or max_completion_tokens) to the sampling cap and what is left of the completion and total
// budgets, setting max_tokens when the agent sent neither.
void CapMaxTokens(const v1::SessionPolicy& p, const BudgetUse& used, json::object& body, Rewrite& rw) {
  const v1::SessionBudget& b = p.budget();
  const uint64_t total = used.prompt_tokens + used.completion_tokens;
  int64_t cap = p.sampling_caps().has_max_tokens() ? p.sampling_caps().max_tokens() : INT64_MAX;
  if (b.max_completion_tokens() > 0)
    cap = std::min<int64_t>(cap, static_cast<int64_t>(b.max_completion_tokens() - used.completion_tokens));
  if (b.max_total_tokens() > 0) cap = std::min<int64_t>(cap, static_cast<int64_t>(b.max_total_tokens() - total));
  if (cap != INT64_MAX) {
    bool set = false;
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      if (auto* v = body.if_contains(key); v != nullptr && v->is_int64()) {
        v->emplace_int64() = std::min(v->as_int64(), cap);
        rw.set_keys.emplace_back(key);
        set = true;
      }
    }
    if (!set) {
      body["max_tokens"] = cap;
      rw.set_keys.emplace_back("max_tokens");
    }
  }
}

// The agent's narrowing knobs go (the recorded logprobs are then the policy's); then the session's overrides set
// theirs, replacing whatever the agent sent.
void NeutralizeAndOverride(const v1::SessionPolicy& p, json::object& body, Rewrite& rw) {
  if (p.has_neutralize_sampling() ? p.neutralize_sampling() : p.capture_token_ids()) {
    json::object removed;
    for (const char* key : kNarrowingKnobs) {
      auto it = body.find(key);
      if (it == body.end()) continue;
      if (!it->value().is_null()) removed[key] = it->value();
      rw.removed_keys.emplace_back(key);
      body.erase(it);
    }
    if (!removed.empty()) rw.neutralized_json = json::serialize(removed);
  }

  const v1::SamplingOverrides& o = p.sampling_overrides();
  auto set = [&](const char* key, json::value v) {
    body[key] = std::move(v);
    rw.set_keys.emplace_back(key);
  };
  if (o.has_temperature()) set("temperature", o.temperature());
  if (o.has_top_p()) set("top_p", o.top_p());
  if (o.has_top_k()) set("top_k", o.top_k());
  if (o.has_min_p()) set("min_p", o.min_p());
  if (o.has_presence_penalty()) set("presence_penalty", o.presence_penalty());
  if (o.has_frequency_penalty()) set("frequency_penalty", o.frequency_penalty());
  if (o.has_repetition_penalty()) set("repetition_penalty", o.repetition_penalty());
  if (o.has_seed()) set("seed", o.seed());
  if (!o.extra_body_json().empty()) {
    boost::system::error_code ec;
    json::value extra = json::parse(o.extra_body_json(), ec);
    if (!ec && extra.is_object()) {
      for (auto& [k, v] : extra.as_object()) {
        body[k] = v;
        rw.set_keys.emplace_back(k);
      }
    }
  }
  if (p.sampling_caps().has_max_top_logprobs()) {
    if (auto* v = body.if_contains("top_logprobs"); v != nullptr && v->is_int64()) {
      v->emplace_int64() = std::min<int64_t>(v->as_int64(), p.sampling_caps().max_top_logprobs());
    }
  }
}

// Token capture: ask the backend for token ids, logprobs and usage, remembering what the agent did not ask for.
void CaptureTokens(const v1::SessionPolicy& p, bool chat, json::object& body, Rewrite& rw) {
  rw.stream = Truthy(body, "stream");
  if (p.capture_token_ids()) {
    rw.strip_token_ids = !Truthy(body, "return_token_ids");
    body["return_token_ids"] = true;
  }
  if (p.capture_logprobs()) {
    if (chat) {
      rw.strip_logprobs = !Truthy(body, "logprobs");
      body["logprobs"] = true;
    } else {
      rw.strip_logprobs = !body.contains("logprobs") || body.at("logprobs").is_null();
      if (rw.strip_logprobs) body["logprobs"] = 0;
    }
  }
  if (rw.stream) {
    // Usage is recorded for every streamed call; the extra chunk is dropped if the agent did not ask for it.
    json::object so;
    if (auto* v = body.if_contains("stream_options"); v != nullptr && v->is_object()) so = v->as_object();
    rw.strip_usage_chunk = !Truthy(so, "include_usage");
    so["include_usage"] = true;
    body["stream_options"] = std::move(so);
  }
}

}  // namespace

absl::Status ValidatePolicy(const v1::SessionPolicy& p) {
  for (const auto& [alias, target] : p.model_aliases()) {
    if (target.empty()) return absl::InvalidArgumentError(absl::StrCat("model_aliases['", alias, "'] is empty"));
    if (!Allowed(p, target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model_aliases['", alias, "'] = '", target, "' is not in allowed_models"));
    }
  }
  if (!p.sampling_overrides().extra_body_json().empty()) {
    boost::system::error_code ec;
    json::value v = json::parse(p.sampling_overrides().extra_body_json(), ec);
    if (ec || !v.is_object()) {
      return absl::InvalidArgumentError("sampling_overrides.extra_body_json must be a JSON object");
    }
  }
  if (p.sampling_caps().has_max_tokens() && p.sampling_caps().max_tokens() < 1) {
    return absl::InvalidArgumentError("sampling_caps.max_tokens must be at least 1");
  }
  if (p.sampling_caps().has_max_top_logprobs() && p.sampling_caps().max_top_logprobs() < 0) {
    return absl::InvalidArgumentError("sampling_caps.max_top_logprobs must not be negative");
  }
  return ValidateRoleRules(p.role_rules());
}

absl::StatusOr<std::string> ResolveSessionModel(const v1::SessionPolicy& policy, const std::string& requested,
                                                const std::string& default_model,
                                                const std::optional<std::vector<std::string>>& served) {
  std::string model = !requested.empty() ? requested : default_model;
  if (model.empty() && served.has_value() && served->size() == 1) model = served->front();
  if (model.empty() || !served.has_value() || served->empty()) return model;
  const std::string target = UpstreamModel(policy, model);
  if (std::find(served->begin(), served->end(), target) != served->end()) return model;
  return absl::InvalidArgumentError(
      absl::StrCat("model '", target, "'", target == model ? "" : absl::StrCat(" (for '", model, "')"),
                   " is not served by the upstream; it serves: ", absl::StrJoin(*served, ", "),
                   ". Name one of those in the task (llm.model) or leave it empty to use the default"));
}

PolicyOutcome ApplyPolicy(const v1::SessionPolicy& p, const BudgetUse& used, bool chat, json::object& body,
                          const std::string& session_model) {
  auto* model_v = body.if_contains("model");
  const bool unnamed =
      model_v == nullptr || model_v->is_null() || (model_v->is_string() && model_v->as_string().empty());
  if (unnamed && !session_model.empty()) {
    body["model"] = session_model;
    model_v = body.if_contains("model");
  }
  if (model_v == nullptr || !model_v->is_string() || model_v->as_string().empty()) {
    return Refuse(Refusal::kBadRequest, "'model' must be a non-empty string");
  }
  if (std::optional<std::string> bad = MalformedRequest(chat, body)) return Refuse(Refusal::kBadRequest, *bad);
  PolicyOutcome out;
  Rewrite& rw = out.rewrite;
  rw.requested_model = std::string(model_v->as_string());
  rw.model = UpstreamModel(p, rw.requested_model);
  if (!Allowed(p, rw.model)) {
    return Refuse(Refusal::kModelNotAllowed, absl::StrCat("model '", rw.model, "' is not allowed in this session"));
  }
  body["model"] = rw.model;

  // Budgets: refuse what would pass one; lower max_tokens to what is left of the completion budget.
  if (std::optional<std::string> spent = BudgetSpent(p.budget(), used)) {
    return Refuse(Refusal::kBudgetExhausted, *spent);
  }
  CapMaxTokens(p, used, body, rw);

  NeutralizeAndOverride(p, body, rw);

  CaptureTokens(p, chat, body, rw);
  return out;
}

}  // namespace corral::proxy
