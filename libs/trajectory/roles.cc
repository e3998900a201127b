#include "libs/trajectory/roles.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json/parse.hpp"

namespace corral {
namespace {

constexpr size_t kMinAnswer = 64;    // shorter answers (a title, "OK") are too common to link conversations by
constexpr size_t kMinArgument = 16;  // shorter arguments (a path, a flag) are not a conversation's first message

const v1::ChatMessage* First(const v1::RecordedCall& r, std::initializer_list<absl::string_view> roles) {
  for (const v1::ChatMessage& m : r.prompt()) {
    if (std::find(roles.begin(), roles.end(), m.role()) != roles.end()) return &m;
  }
  return nullptr;
}

bool UserSays(const v1::RecordedCall& r, absl::string_view text) {
  for (const v1::ChatMessage& m : r.prompt()) {
    if (m.role() == "user" && absl::StrContains(m.content(), text)) return true;
  }
  return false;
}

bool Matches(const v1::CallRoleRule& rule, const v1::RecordedCall& r) {
  const v1::LlmCall& call = r.call();
  if (!rule.models().empty() &&
      std::find(rule.models().begin(), rule.models().end(), call.requested_model()) == rule.models().end()) {
    return false;
  }
  if (!rule.system_prefix().empty()) {
    const v1::ChatMessage* system = First(r, {"system", "developer"});
    if (system == nullptr || !absl::StartsWith(system->content(), rule.system_prefix())) return false;
  }
  if (!rule.user_contains().empty() && !UserSays(r, rule.user_contains())) return false;
  const bool tools = !call.tools_json().empty() && call.tools_json() != "[]";
  if (rule.tools() == v1::CallRoleRule::TOOLS_NONE && tools) return false;
  if (rule.tools() == v1::CallRoleRule::TOOLS_SOME && !tools) return false;
  return true;
}

void CollectStrings(const boost::json::value& v, std::vector<std::string>& out) {
  if (v.is_string()) {
    absl::string_view s = absl::StripAsciiWhitespace(absl::string_view(v.as_string().data(), v.as_string().size()));
    if (s.size() >= kMinArgument) out.emplace_back(s);
  } else if (v.is_array()) {
    for (const auto& e : v.as_array()) CollectStrings(e, out);
  } else if (v.is_object()) {
    for (const auto& [k, e] : v.as_object()) CollectStrings(e, out);
  }
}

}  // namespace

std::optional<RoleVerdict> MatchRoleRule(const RoleRules& rules, const v1::RecordedCall& recorded) {
  for (const v1::CallRoleRule& rule : rules) {
    if (Matches(rule, recorded)) return RoleVerdict{rule.role(), rule.reason()};
  }
  return std::nullopt;
}

absl::Status ValidateRoleRules(const RoleRules& rules) {
  for (int i = 0; i < rules.size(); ++i) {
    const v1::CallRoleRule& r = rules[i];
    const std::string name = absl::StrCat("role_rules[", i, "]");
    if (r.role() != v1::CALL_ROLE_AGENT && r.role() != v1::CALL_ROLE_AUXILIARY &&
        r.role() != v1::CALL_ROLE_COMPACTION) {
      return absl::InvalidArgumentError(
          absl::StrCat(name,
                       ".role must be AGENT, AUXILIARY or COMPACTION (retries and subagents are found from "
                       "the session, not from one request)"));
    }
    if (r.models().empty() && r.system_prefix().empty() && r.user_contains().empty() &&
        r.tools() == v1::CallRoleRule::TOOLS_ANY) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has no condition (set models, system_prefix, user_contains or tools)"));
    }
    if (r.reason().empty()) return absl::InvalidArgumentError(absl::StrCat(name, ".reason is empty"));
  }
  return absl::OkStatus();
}

absl::string_view RoleName(v1::CallRole role) {
  switch (role) {
    case v1::CALL_ROLE_AGENT: return "agent";
    case v1::CALL_ROLE_AUXILIARY: return "auxiliary";
    case v1::CALL_ROLE_RETRY: return "retry";
    case v1::CALL_ROLE_COMPACTION: return "compaction";
    case v1::CALL_ROLE_SUBAGENT: return "subagent";
    default: return "unspecified";
  }
}

bool IsLineage(v1::CallRole role) {
  return role == v1::CALL_ROLE_AGENT || role == v1::CALL_ROLE_COMPACTION || role == v1::CALL_ROLE_SUBAGENT;
}

bool OffersTools(const v1::LlmCall& call) { return !call.tools_json().empty() && call.tools_json() != "[]"; }

bool CarriesAnswer(absl::string_view text, absl::string_view answer) {
  answer = absl::StripAsciiWhitespace(answer);
  return answer.size() >= kMinAnswer && absl::StrContains(text, answer);
}

std::vector<std::string> StringArguments(absl::string_view arguments_json) {
  std::vector<std::string> out;
  boost::system::error_code ec;
  const boost::json::value v =
      boost::json::parse(boost::json::string_view(arguments_json.data(), arguments_json.size()), ec);
  if (!ec) CollectStrings(v, out);
  return out;
}

}  // namespace corral
