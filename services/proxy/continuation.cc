#include "services/proxy/continuation.h"

#include <algorithm>

namespace corral::proxy {

namespace json = boost::json;

bool Continuable(const json::object& body, bool chat, const ResponseAssembler& so_far) {
  if (auto* n = body.if_contains("n"); n != nullptr && !n->is_null() && !(n->is_int64() && n->as_int64() == 1)) {
    return false;
  }
  if (chat) return !so_far.has_tool_calls() && !so_far.has_reasoning();
  auto* prompt = body.if_contains("prompt");
  auto* echo = body.if_contains("echo");
  const bool echoes = echo != nullptr && !(echo->is_null() || (echo->is_bool() && !echo->as_bool()));
  return prompt != nullptr && prompt->is_string() && !echoes;
}

json::object ContinuationBody(const json::object& body, bool chat, const ResponseAssembler& so_far) {
  json::object out = body;
  if (chat) {
    json::object assistant;
    assistant["role"] = "assistant";
    assistant["content"] = so_far.text();
    out["messages"].as_array().push_back(std::move(assistant));
    out["continue_final_message"] = true;
    out["add_generation_prompt"] = false;
  } else {
    out["prompt"] = std::string(body.at("prompt").as_string()) + so_far.text();
  }
  const int64_t generated = static_cast<int64_t>(so_far.generated_tokens());
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (auto* v = out.if_contains(key); v != nullptr && v->is_int64())
      *v = std::max<int64_t>(1, v->as_int64() - generated);
  }
  return out;
}

void AdaptContinuationChunk(const std::string& id, json::object& chunk) {
  if (!id.empty() && chunk.contains("id")) chunk["id"] = id;
  chunk.erase("prompt_token_ids");
  if (auto* choices = chunk.if_contains("choices"); choices != nullptr && choices->is_array()) {
    for (auto& c : choices->as_array()) {
      if (!c.is_object()) continue;
      c.as_object().erase("prompt_token_ids");
      if (auto* d = c.as_object().if_contains("delta"); d != nullptr && d->is_object()) d->as_object().erase("role");
    }
  }
}

}  // namespace corral::proxy
