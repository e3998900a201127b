// What the fake model says, apart from how it is asked: its tokenizer (word tokens with stable ids) and the
// arithmetic player (a stand-in policy whose rewards vary by seed). The native Messages and Responses answers
// reshape its chat answers with the same tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace corral::fakellm {

// What the arithmetic mode does with one request: a tool call (`arguments` set) or a text reply.
struct ArithmeticPlan {
  bool tool_call = false;
  std::string arguments;  // JSON for the tool call
  std::string reply;      // otherwise
};
// `last_user` holds "A op B" (op one of + - * /); `tool_property` is the first property of the first offered
// tool's schema ("code", "command", or "" when no tool is offered); `tool_output` is the last message's content
// when it is a tool result (nullptr otherwise). One seed in four answers wrong by one. nullopt when there is no
// expression.
std::optional<ArithmeticPlan> PlanArithmetic(const std::string& last_user, const std::string& tool_property,
                                             const std::string* tool_output, int64_t seed);

// Stable fake token ids: the same text always gives the same ids, streamed or not.
std::vector<std::string> SplitTokens(const std::string& text);
int32_t TokenId(const std::string& token);

}  // namespace corral::fakellm
