#include "services/proxy/capture.h"

#include <algorithm>

#include "boost/json/serialize.hpp"
#include "libs/http/openai_json.h"
#include "libs/trajectory/resent.h"

namespace corral::proxy {
namespace {

namespace json = boost::json;

using http::StringOf;

uint64_t U64(const json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  if (v == nullptr) return 0;
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64() && v->as_int64() > 0) return static_cast<uint64_t>(v->as_int64());
  return 0;
}

void AppendIds(const json::value* v, std::vector<int32_t>& out) {
  if (v == nullptr || !v->is_array()) return;
  for (const auto& id : v->as_array()) {
    if (id.is_int64()) out.push_back(static_cast<int32_t>(id.as_int64()));
    if (id.is_uint64()) out.push_back(static_cast<int32_t>(id.as_uint64()));
  }
}

float AsFloat(const json::value& v) {
  if (v.is_double()) return static_cast<float>(v.as_double());
  if (v.is_int64()) return static_cast<float>(v.as_int64());
  return 0;
}

}  // namespace

v1::ChatMessage MessageFrom(const json::object& m) {
  v1::ChatMessage out;
  out.set_role(StringOf(m.if_contains("role")));
  if (auto* c = m.if_contains("content"); c != nullptr) {
    if (c->is_string()) {
      out.set_content(std::string(c->as_string()));
    } else if (c->is_array()) {
      out.set_content_parts_json(json::serialize(*c));
      std::string text;
      for (const auto& part : c->as_array()) {
        if (part.is_object()) text += StringOf(part.as_object().if_contains("text"));
      }
      out.set_content(text);
    }
  }
  out.set_reasoning_content(StringOf(m.if_contains("reasoning_content")));
  out.set_tool_call_id(StringOf(m.if_contains("tool_call_id")));
  out.set_name(StringOf(m.if_contains("name")));
  if (auto* calls = m.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
    for (const auto& c : calls->as_array()) {
      if (!c.is_object()) continue;
      v1::ToolCall* tc = out.add_tool_calls();
      tc->set_id(StringOf(c.as_object().if_contains("id")));
      tc->set_type(StringOf(c.as_object().if_contains("type")));
      if (auto* fn = c.as_object().if_contains("function"); fn != nullptr && fn->is_object()) {
        tc->set_function_name(StringOf(fn->as_object().if_contains("name")));
        tc->set_arguments(StringOf(fn->as_object().if_contains("arguments")));
      }
    }
  }
  return out;
}

std::vector<v1::ChatMessage> MessagesFrom(const json::array& messages) {
  std::vector<v1::ChatMessage> out;
  for (const auto& m : messages) {
    if (m.is_object()) out.push_back(MessageFrom(m.as_object()));
  }
  return out;
}

void WriteRestored(const std::vector<v1::ChatMessage>& prompt, const std::vector<v1::RestoredMessage>& restored,
                   json::array& messages) {
  for (const v1::RestoredMessage& r : restored) {
    if (r.index() >= messages.size() || r.index() >= prompt.size() || !messages[r.index()].is_object()) continue;
    json::object& sent = messages[r.index()].as_object();
    const v1::ChatMessage& own = prompt[r.index()];
    if (own.role() != "assistant") {
      sent["tool_call_id"] = own.tool_call_id();
      continue;
    }
    json::object model = OpenAiMessage(own);
    // No content: the agent's null or "" stands (the model sent none either way).
    if (own.content().empty() && own.content_parts_json().empty()) model.erase("content");
    for (auto& [key, value] : model) sent[key] = std::move(value);
  }
}

void ResponseAssembler::Common(const json::object& o) {
  if (auto* u = o.if_contains("usage"); u != nullptr && u->is_object()) {
    const json::object& uo = u->as_object();
    usage_.set_prompt_tokens(U64(uo, "prompt_tokens"));
    usage_.set_completion_tokens(U64(uo, "completion_tokens"));
    usage_.set_total_tokens(U64(uo, "total_tokens"));
    if (auto* d = uo.if_contains("prompt_tokens_details"); d != nullptr && d->is_object()) {
      usage_.set_cached_prompt_tokens(U64(d->as_object(), "cached_tokens"));
    }
    if (continued_) {
      if (base_prompt_ > 0) usage_.set_prompt_tokens(base_prompt_);
      usage_.set_completion_tokens(usage_.completion_tokens() + base_completion_);
      usage_.set_total_tokens(usage_.prompt_tokens() + usage_.completion_tokens());
    }
  }
  if (prompt_ids_.empty()) AppendIds(o.if_contains("prompt_token_ids"), prompt_ids_);
}

void ResponseAssembler::Choice(const json::object& choice, bool whole) {
  saw_choice_ = true;
  if (auto f = StringOf(choice.if_contains("finish_reason")); !f.empty()) finish_reason_ = f;
  if (prompt_ids_.empty()) AppendIds(choice.if_contains("prompt_token_ids"), prompt_ids_);
  AppendIds(choice.if_contains("token_ids"), completion_ids_);
  if (auto* lp = choice.if_contains("logprobs"); lp != nullptr && lp->is_object()) {
    if (auto* content = lp->as_object().if_contains("content"); content != nullptr && content->is_array()) {
      for (const auto& e : content->as_array()) {
        if (e.is_object() && e.as_object().contains("logprob"))
          logprobs_.push_back(AsFloat(e.as_object().at("logprob")));
      }
    }
    if (auto* tl = lp->as_object().if_contains("token_logprobs"); tl != nullptr && tl->is_array()) {
      for (const auto& e : tl->as_array()) logprobs_.push_back(AsFloat(e));
    }
  }
  if (!chat_) {
    const std::string piece = StringOf(choice.if_contains("text"));
    if (!piece.empty()) ++text_chunks_;
    text_ += piece;
    return;
  }
  const json::value* m = choice.if_contains(whole ? "message" : "delta");
  if (m == nullptr || !m->is_object()) return;
  const json::object& mo = m->as_object();
  if (auto r = StringOf(mo.if_contains("role")); !r.empty()) role_ = r;
  const std::string piece = StringOf(mo.if_contains("content"));
  if (!piece.empty()) ++text_chunks_;
  text_ += piece;
  reasoning_ += StringOf(mo.if_contains("reasoning_content"));
  if (auto* calls = mo.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
    for (const auto& c : calls->as_array()) {
      if (!c.is_object()) continue;
      const json::object& co = c.as_object();
      // Streamed tool calls arrive in pieces addressed by index; whole ones in order.
      size_t index = tool_calls_.size();
      if (!whole) {
        if (auto* i = co.if_contains("index"); i != nullptr && i->is_int64() && i->as_int64() >= 0) {
          index = static_cast<size_t>(i->as_int64());
        }
      }
      if (index > 1024) continue;
      if (tool_calls_.size() <= index) tool_calls_.resize(index + 1);
      v1::ToolCall& tc = tool_calls_[index];
      if (auto id = StringOf(co.if_contains("id")); !id.empty()) tc.set_id(id);
      if (auto type = StringOf(co.if_contains("type")); !type.empty()) tc.set_type(type);
      if (auto* fn = co.if_contains("function"); fn != nullptr && fn->is_object()) {
        if (auto name = StringOf(fn->as_object().if_contains("name")); !name.empty()) tc.set_function_name(name);
        tc.mutable_arguments()->append(StringOf(fn->as_object().if_contains("arguments")));
      }
    }
  }
}

void ResponseAssembler::AddWhole(const json::object& response) {
  Common(response);
  if (auto* choices = response.if_contains("choices");
      choices != nullptr && choices->is_array() && !choices->as_array().empty() && choices->as_array()[0].is_object()) {
    Choice(choices->as_array()[0].as_object(), /*whole=*/true);
  }
}

void ResponseAssembler::AddChunk(const json::object& chunk) {
  Common(chunk);
  if (auto* choices = chunk.if_contains("choices"); choices != nullptr && choices->is_array()) {
    for (const auto& c : choices->as_array()) {
      if (!c.is_object()) continue;
      auto* index = c.as_object().if_contains("index");
      if (index == nullptr || (index->is_int64() && index->as_int64() == 0)) Choice(c.as_object(), /*whole=*/false);
    }
  }
}

uint64_t ResponseAssembler::generated_tokens() const {
  if (!completion_ids_.empty()) return completion_ids_.size();
  return std::max<uint64_t>(usage_.completion_tokens(), text_chunks_);
}

void ResponseAssembler::BeginContinuation() {
  if (!continued_) base_prompt_ = !prompt_ids_.empty() ? prompt_ids_.size() : usage_.prompt_tokens();
  base_completion_ = generated_tokens();
  continued_ = true;
}

v1::ChatMessage ResponseAssembler::message() const {
  v1::ChatMessage m;
  m.set_role(role_);
  m.set_content(text_);
  m.set_reasoning_content(reasoning_);
  for (const auto& tc : tool_calls_) *m.add_tool_calls() = tc;
  return m;
}

bool StripForAgent(const Rewrite& rw, json::object& o) {
  if (rw.strip_usage_chunk) {
    auto* choices = o.if_contains("choices");
    if (o.contains("usage") && choices != nullptr && choices->is_array() && choices->as_array().empty()) return false;
    o.erase("usage");
  }
  if (rw.strip_token_ids) o.erase("prompt_token_ids");
  if (auto* choices = o.if_contains("choices"); choices != nullptr && choices->is_array()) {
    for (auto& c : choices->as_array()) {
      if (!c.is_object()) continue;
      if (rw.strip_token_ids) {
        c.as_object().erase("token_ids");
        c.as_object().erase("prompt_token_ids");
      }
      if (rw.strip_logprobs && c.as_object().contains("logprobs")) c.as_object()["logprobs"] = nullptr;
    }
  }
  return true;
}

void ResponseAssembler::FillRecord(bool ok, RecordedCall* record) const {
  v1::LlmCall& call = *record->mutable_call();
  if (ok && chat_ && saw_choice_) *record->mutable_response() = message();
  if (ok && !chat_) call.set_completion_text(text_);
  call.set_finish_reason(ok ? finish_reason_ : "");
  *call.mutable_usage() = usage_;
  *call.mutable_prompt_token_ids() = {prompt_ids_.begin(), prompt_ids_.end()};
  *call.mutable_completion_token_ids() = {completion_ids_.begin(), completion_ids_.end()};
  *call.mutable_completion_logprobs() = {logprobs_.begin(), logprobs_.end()};
}

}  // namespace corral::proxy
