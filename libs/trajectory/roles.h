// What a recorded call is to a trainer (common.proto CallRole). A call's request is matched against rules given
// as data (SessionPolicy.role_rules: a harness's title, summary and side-model calls); the store adds what only
// the session as a whole shows — a conversation continuing from an earlier answer (compaction), one started by
// a tool call's argument (a subagent), a prompt sampled again (a retry), a call without tools beside an agent
// whose calls carry them (auxiliary). How each is found: docs/proxy.md, "Roles".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "corral/v1/common.pb.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace corral {

using RoleRules = google::protobuf::RepeatedPtrField<v1::CallRoleRule>;

struct RoleVerdict {
  v1::CallRole role = v1::CALL_ROLE_UNSPECIFIED;
  std::string reason;
};

// The first of `rules` whose every set condition `recorded` meets, as its role and reason; nullopt when none.
std::optional<RoleVerdict> MatchRoleRule(const RoleRules& rules, const v1::RecordedCall& recorded);

// INVALID_ARGUMENT naming the rule (role_rules[i]) when its role is not AGENT, AUXILIARY or COMPACTION, it has no
// condition, or its reason is missing.
absl::Status ValidateRoleRules(const RoleRules& rules);

// "agent", "auxiliary", "retry", "compaction", "subagent" ("unspecified").
absl::string_view RoleName(v1::CallRole role);

// The lineage roles: the conversations a trainer trains on by default.
bool IsLineage(v1::CallRole role);

// Whether the call offered the model tools (its tools JSON is not empty).
bool OffersTools(const v1::LlmCall& call);

// True when `text` (a message that opens a conversation) carries `answer` (an earlier model answer) whole: the
// answer, trimmed, is at least 64 characters long and appears in the text.
bool CarriesAnswer(absl::string_view text, absl::string_view answer);

// The string values (at least 16 characters, trimmed) anywhere in a tool call's JSON arguments; none when the
// arguments are not JSON.
std::vector<std::string> StringArguments(absl::string_view arguments_json);

}  // namespace corral
