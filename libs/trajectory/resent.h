// What an agent sends back of the model's own messages. Harnesses keep the conversation in their own form and
// re-serialize it on the next call: tool-call arguments re-encoded ({"a": 1} as {"a":1}), ids renamed, content
// trimmed or split into parts, reasoning left out. Such a message is still the model's sample; a genuine edit
// (other text, other arguments, another tool) is not. Also the one writer of a ChatMessage as OpenAI chat JSON.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "boost/json/object.hpp"
#include "corral/v1/common.pb.h"

namespace corral {

// True when `sent` is `sampled` (an assistant message the model produced) spelled differently; `changes` gets
// what differs ("arguments re-encoded", "tool-call ids", "content whitespace", "content parts", "reasoning left
// out") and `ids` each renamed tool-call id (sent → sampled). False for any other difference.
bool IsResent(const v1::ChatMessage& sampled, const v1::ChatMessage& sent, std::vector<std::string>* changes,
              absl::flat_hash_map<std::string, std::string>* ids);

// `message` as an OpenAI chat message: role, content (its parts when it has them), reasoning_content, name,
// tool_call_id and tool_calls, each only when set (content always).
boost::json::object OpenAiMessage(const v1::ChatMessage& message);

}  // namespace corral
