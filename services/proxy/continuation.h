// Continuing a call that a generation pause cut upstream (common.proto, "Pausing generation"): the request that
// picks up where the cut one stopped, and the continuation's chunks made to look like the rest of the stream the
// agent was already reading.
#pragma once

#include <string>

#include "boost/json/object.hpp"
#include "services/proxy/capture.h"

namespace corral::proxy {

// Whether the call, having produced `so_far`, could be continued: one choice; chat: no tool-call or reasoning
// deltas yet (their raw text is not recoverable from the deltas); completions: a string prompt, no `echo`.
bool Continuable(const boost::json::object& body, bool chat, const ResponseAssembler& so_far);

// The request that continues `body` after `so_far`: chat appends the assistant text as a final message to
// continue (`continue_final_message`, `add_generation_prompt: false`); completions append it to the prompt.
// `max_tokens` / `max_completion_tokens` shrink by the tokens already generated (at least 1 is left).
boost::json::object ContinuationBody(const boost::json::object& body, bool chat, const ResponseAssembler& so_far);

// A continuation's chunk as part of the original stream: the original's `id`, no second `role` delta, no
// `prompt_token_ids` (the prompt is the original one).
void AdaptContinuationChunk(const std::string& id, boost::json::object& chunk);

}  // namespace corral::proxy
