// A session's policy applied to one OpenAI request body (SessionPolicy in common.proto): model aliases and the
// allow-list, sampling overrides and caps, budgets, and the backend options that make vLLM/SGLang return token
// ids and logprobs — remembering which of those the agent did not ask for, so they are stripped from its reply.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/json/object.hpp"
#include "corral/v1/common.pb.h"

namespace corral::proxy {

// What the policy did to a request, needed to record the call and rewrite the reply.
struct Rewrite {
  std::string requested_model;  // what the agent asked for
  std::string model;            // what is sent upstream
  bool stream = false;
  bool strip_token_ids = false;  // captured for the trajectory, not asked for by the agent
  bool strip_logprobs = false;
  bool strip_usage_chunk = false;  // streamed usage was added for recording, not asked for
  // The sampling keys the policy set on the body (its token cap, its overrides): what a call that goes to its
  // upstream untranslated must carry too.
  std::vector<std::string> set_keys;
  // The sampling knobs of the agent's that SessionPolicy.neutralize_sampling removed (a native body loses them
  // too), and their values as a JSON object for the record ("" when none).
  std::vector<std::string> removed_keys;
  std::string neutralized_json;
};

// The knobs SessionPolicy.neutralize_sampling removes: those that reshape the distribution tokens are drawn from.
inline constexpr const char* kNarrowingKnobs[] = {
    "top_p",     "top_k", "min_p", "typical_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    "logit_bias"};

// Why a request is refused before it reaches an upstream; mapped to HTTP by the handler.
enum class Refusal { kNone, kBadRequest, kModelNotAllowed, kBudgetExhausted };

struct PolicyOutcome {
  Refusal refusal = Refusal::kNone;
  std::string message;
  Rewrite rewrite;
};

struct BudgetUse {
  uint64_t calls = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};

// Validates the policy itself (OpenSession): INVALID_ARGUMENT for an alias to a model outside allowed_models,
// extra_body_json that is not a JSON object, negative caps, a role rule without a condition (roles.h).
absl::Status ValidatePolicy(const v1::SessionPolicy& policy);

// The model a session's calls use when they name none, chosen at OpenSession: `requested`, else
// `default_model`, else the one model the upstreams serve when they serve exactly one; "" when none can be
// chosen. INVALID_ARGUMENT when the upstreams' models are known (`served`) and the chosen one — after the
// policy's aliases — is not among them, naming both.
absl::StatusOr<std::string> ResolveSessionModel(const v1::SessionPolicy& policy, const std::string& requested,
                                                const std::string& default_model,
                                                const std::optional<std::vector<std::string>>& served);

// Rewrites `body` in place for `chat` (/v1/chat/completions) or completions. A body that names no model gets
// `session_model` (ResolveSessionModel) when there is one. Refuses: a body without a model or (chat) messages
// array, a model not allowed, an exhausted budget.
PolicyOutcome ApplyPolicy(const v1::SessionPolicy& policy, const BudgetUse& used, bool chat, boost::json::object& body,
                          const std::string& session_model = "");

}  // namespace corral::proxy
