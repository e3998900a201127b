// What the proxy takes from OpenAI-shaped JSON: request messages as ChatMessage protos, and a response —
// whole, or assembled from streamed chunks — as a message, finish reason, usage, token ids and logprobs
// (vLLM's shapes: `prompt_token_ids` at the top level or in a choice, `choices[0].token_ids`, chat
// `logprobs.content[].logprob`, completions `logprobs.token_logprobs`). Also removes what the agent did not ask
// for from what it receives.
#pragma once

#include <string>
#include <vector>

#include "boost/json/object.hpp"
#include "corral/v1/common.pb.h"
#include "libs/trajectory/trajectory.h"
#include "services/proxy/policy.h"

namespace corral::proxy {

// Request side. Content arrays keep their JSON in content_parts_json and their text parts in content.
std::vector<v1::ChatMessage> MessagesFrom(const boost::json::array& messages);
v1::ChatMessage MessageFrom(const boost::json::object& message);
// Writes the `restored` messages of `prompt` (TrajectoryStore::Restore) back into the request's `messages`, so
// the upstream gets the model's own: an assistant message's content, reasoning and tool calls, a tool result's
// tool_call_id. Fields the agent added that the record does not hold are kept. `messages` and `prompt` are
// index for index.
void WriteRestored(const std::vector<v1::ChatMessage>& prompt, const std::vector<v1::RestoredMessage>& restored,
                   boost::json::array& messages);

// Assembles one call's outcome from a whole response or from its stream chunks (choice 0).
class ResponseAssembler {
 public:
  explicit ResponseAssembler(bool chat) : chat_(chat) {}
  void AddWhole(const boost::json::object& response);
  void AddChunk(const boost::json::object& chunk);

  v1::ChatMessage message() const;                   // chat
  const std::string& text() const { return text_; }  // completions (and chat content)
  const std::string& finish_reason() const { return finish_reason_; }
  const v1::Usage& usage() const { return usage_; }
  const std::vector<int32_t>& prompt_token_ids() const { return prompt_ids_; }
  const std::vector<int32_t>& completion_token_ids() const { return completion_ids_; }
  const std::vector<float>& completion_logprobs() const { return logprobs_; }
  bool saw_choice() const { return saw_choice_; }
  bool has_tool_calls() const { return !tool_calls_.empty(); }
  bool has_reasoning() const { return !reasoning_.empty(); }
  // Completion tokens so far: the token ids when captured, else the usage, else the chunks that carried text.
  uint64_t generated_tokens() const;
  // What follows comes from a continuation of this call (continuation.h): its usage counts on top of what was
  // generated so far, and the original prompt's token count is kept.
  void BeginContinuation();
  bool continued() const { return continued_; }
  // Writes what was assembled into the call's record: the response message (chat) or completion text, finish
  // reason (only when `ok`), usage, token ids and logprobs.
  void FillRecord(bool ok, RecordedCall* record) const;

 private:
  void Common(const boost::json::object& o);
  void Choice(const boost::json::object& choice, bool whole);
  bool chat_;
  bool saw_choice_ = false;
  std::string role_ = "assistant";
  std::string text_, reasoning_, finish_reason_;
  std::vector<v1::ToolCall> tool_calls_;
  v1::Usage usage_;
  std::vector<int32_t> prompt_ids_, completion_ids_;
  std::vector<float> logprobs_;
  uint64_t text_chunks_ = 0;
  bool continued_ = false;
  uint64_t base_prompt_ = 0, base_completion_ = 0;
};

// Removes captured fields the agent did not ask for from a response or chunk. Returns false when the whole
// chunk should be dropped (the usage-only chunk the proxy asked for).
bool StripForAgent(const Rewrite& rewrite, boost::json::object& response_or_chunk);

}  // namespace corral::proxy
