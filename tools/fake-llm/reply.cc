#include "tools/fake-llm/reply.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "libs/http/openai_json.h"
#include "tools/fake-llm/fake_model.h"
#include "tools/fake-llm/json_text.h"
#include "tools/fake-llm/native_gemini.h"
#include "tools/fake-llm/native_messages.h"
#include "tools/fake-llm/native_responses.h"
#include "tools/fake-llm/shell_agent.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;

int64_t IntOr(const json::object& o, const char* key, int64_t fallback) {
  auto* v = o.if_contains(key);
  return v != nullptr && v->is_int64() ? v->as_int64() : fallback;
}

std::string Json(const json::value& v) { return json::serialize(v); }

json::array Ids(const std::vector<std::string>& tokens) {
  json::array ids;
  for (const auto& t : tokens) ids.push_back(TokenId(t));
  return ids;
}

double Logprob(size_t i) { return -0.015625 * static_cast<double>(i % 64 + 1); }  // exact in float and double

// The plan's timing and failures: the options', then what the request's {"fake": {...}} asks.
void ApplyFakeOverrides(const Options& options, int64_t n, const json::object& body, Plan& plan) {
  plan.ttft = options.ttft;
  plan.inter_token = options.inter_token;
  plan.reply = options.reply;
  if (n <= options.fail_first) plan.status = 500;
  if (auto* f = body.if_contains("fake"); f != nullptr && f->is_object()) {
    const json::object& fo = f->as_object();
    plan.status = static_cast<int>(IntOr(fo, "status", plan.status));
    plan.ttft = absl::Milliseconds(IntOr(fo, "ttft_ms", absl::ToInt64Milliseconds(plan.ttft)));
    plan.inter_token = absl::Milliseconds(IntOr(fo, "inter_token_ms", absl::ToInt64Milliseconds(plan.inter_token)));
    plan.stall_after_chunks = IntOr(fo, "stall_after_chunks", -1);
    plan.disconnect_after_chunks = IntOr(fo, "disconnect_after_chunks", -1);
    if (auto reply = Str(fo.if_contains("reply")); !reply.empty()) plan.reply = reply;
  }
}

// What the request says, as the reply is chosen from it.
struct Prompt {
  std::string text;  // every message's role and text (chat) or the prompt string (completions)
  std::string last_user, last_role, last_content;
  std::string tool_property;  // the first offered tool's first schema property
};

// The prompt, and (chat) the first offered tool, which the plan calls unless the last message is its answer.
Prompt ReadPrompt(bool chat, const json::object& body, Plan& plan) {
  Prompt p;
  if (!chat) {
    p.text = Str(body.if_contains("prompt"));
    p.last_user = p.text;
    return p;
  }
  if (auto* msgs = body.if_contains("messages"); msgs != nullptr && msgs->is_array()) {
    for (const auto& m : msgs->as_array()) {
      if (!m.is_object()) continue;
      const std::string role = Str(m.as_object().if_contains("role"));
      const std::string text = ContentText(m.as_object().if_contains("content"));
      absl::StrAppend(&p.text, role, ": ", text, "\n");
      p.last_role = role;
      p.last_content = text;
      if (role == "user") p.last_user = text;
    }
  }
  if (auto* tools = body.if_contains("tools"); tools != nullptr && tools->is_array() && !tools->as_array().empty()) {
    const json::value& t = tools->as_array().front();
    if (t.is_object()) {
      if (auto* fn = t.as_object().if_contains("function"); fn != nullptr && fn->is_object()) {
        plan.tool_name = Str(fn->as_object().if_contains("name"));
        plan.tool_call = !plan.tool_name.empty() && p.last_role != "tool";
        const json::value* params = fn->as_object().if_contains("parameters");
        const json::value* props =
            params && params->is_object() ? params->as_object().if_contains("properties") : nullptr;
        if (props && props->is_object() && !props->as_object().empty())
          p.tool_property = props->as_object().begin()->key();
      }
    }
  }
  return p;
}

// What the model does: a scripted agent's next step ({"fake": {"tool_script": [...]}}), the shell agent, the
// arithmetic player, else an echo. Returns the tool call's arguments (when it calls one).
std::string ChooseAction(const Options& options, int64_t n, bool chat, const json::object& body, const Prompt& p,
                         Plan& plan) {
  std::string arguments = absl::StrCat("{\"step\": ", n, "}");
  // {"fake": {"tool_script": ["cmd1", "cmd2"]}} calls the first offered tool with each entry in turn (as its first
  // schema property; an entry {"tool": name, "args": {...}} calls that one), then answers "done: <the last tool
  // output>".
  if (auto* f = body.if_contains("fake"); chat && f != nullptr && f->is_object() && plan.tool_name.size() > 0) {
    if (auto* script = f->as_object().if_contains("tool_script"); script != nullptr && script->is_array()) {
      size_t tool_results = 0;
      std::string last_tool;
      if (auto* msgs = body.if_contains("messages"); msgs != nullptr && msgs->is_array()) {
        for (const auto& m : msgs->as_array()) {
          if (m.is_object() && Str(m.as_object().if_contains("role")) == "tool") {
            ++tool_results;
            last_tool = ContentText(m.as_object().if_contains("content"));
          }
        }
      }
      const json::array& steps = script->as_array();
      const json::object* named =
          tool_results < steps.size() && steps[tool_results].is_object() ? &steps[tool_results].as_object() : nullptr;
      if (tool_results < steps.size() && steps[tool_results].is_string()) {
        plan.tool_call = true;
        json::object args;
        args[p.tool_property.empty() ? "command" : p.tool_property] = steps[tool_results].as_string();
        arguments = json::serialize(args);
      } else if (named != nullptr && !Str(named->if_contains("tool")).empty()) {
        // {"tool": "<name>", "args": {...}}: that tool, with those arguments.
        plan.tool_call = true;
        plan.tool_name = Str(named->if_contains("tool"));
        const json::value* args = named->if_contains("args");
        arguments = json::serialize(args != nullptr && args->is_object() ? *args : json::value(json::object()));
      } else {
        plan.tool_call = false;
        plan.reply = "done: " + last_tool;
      }
    }
  }
  if (options.shell_agent && chat) {
    if (auto a = PlanShellAgent(body, options.shell_agent_command)) {
      plan.tool_call = a->tool_call;
      if (a->tool_call) {
        plan.tool_name = a->tool_name;
        arguments = a->arguments;
      } else {
        plan.reply = a->reply;
      }
    }
  }
  if (options.arithmetic && chat) {
    const int64_t seed = IntOr(body, "seed", n);
    const std::string* tool_output = p.last_role == "tool" ? &p.last_content : nullptr;
    if (auto a = PlanArithmetic(p.last_user, plan.tool_call ? p.tool_property : "", tool_output, seed)) {
      plan.tool_call = a->tool_call;
      if (a->tool_call) {
        arguments = a->arguments;
      } else {
        plan.reply = a->reply;
      }
    }
  }
  if (plan.reply.empty()) plan.reply = "echo: " + p.last_user;
  return arguments;
}

// The answer's JSON, whole or as stream chunks, in the shape OpenAI's chat or completions API gives.
class AnswerWriter {
 public:
  AnswerWriter(const Plan& plan, bool chat, bool stream, std::string model, int64_t n, std::vector<std::string> tokens,
               size_t offset, const std::vector<std::string>& prompt_tokens)
      : plan_(plan),
        chat_(chat),
        model_(std::move(model)),
        tokens_(std::move(tokens)),
        offset_(offset),
        id_(absl::StrCat(chat ? "chatcmpl-" : "cmpl-", n)),
        call_id_(absl::StrCat("call_", n)),
        created_(absl::ToUnixSeconds(absl::Now())),
        object_(chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion") {
    usage_["prompt_tokens"] = prompt_tokens.size();
    usage_["completion_tokens"] = tokens_.size();
    usage_["total_tokens"] = prompt_tokens.size() + tokens_.size();
  }

  std::string Whole(const std::string& arguments, bool want_logprobs, const std::vector<std::string>& prompt_tokens,
                    bool want_ids) const {
    json::object choice;
    choice["index"] = 0;
    choice["finish_reason"] = finish();
    if (chat_) {
      json::object message;
      message["role"] = "assistant";
      if (plan_.tool_call) {
        message["content"] = nullptr;
        json::array calls = ToolCall(true, arguments);
        calls[0].as_object().erase("index");
        message["tool_calls"] = std::move(calls);
      } else {
        message["content"] = plan_.reply;
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = plan_.reply;
    }
    if (want_logprobs) choice["logprobs"] = Logprobs(0, tokens_.size());
    if (want_ids) choice["token_ids"] = Ids(tokens_);
    json::object out = Envelope(std::move(choice));
    out["usage"] = usage_;
    if (want_ids) out["prompt_token_ids"] = Ids(prompt_tokens);
    return Json(out);
  }

  std::vector<std::string> Events(bool want_logprobs, const std::vector<std::string>& prompt_tokens, bool want_ids,
                                  bool include_usage) const {
    std::vector<std::string> events;
    auto event = [&](const json::object& o) { events.push_back(absl::StrCat("data: ", Json(o), "\n\n")); };
    // First chunk: the role (chat), and the prompt's token ids when asked.
    json::object delta;
    if (chat_) {
      delta["role"] = "assistant";
      if (plan_.tool_call) {
        delta["content"] = nullptr;
        delta["tool_calls"] = ToolCall(true, "");
      } else {
        delta["content"] = "";
      }
    }
    json::object first = Chunk(std::move(delta), nullptr);
    if (want_ids) first["prompt_token_ids"] = Ids(prompt_tokens);
    event(first);
    for (size_t i = 0; i < tokens_.size(); ++i) {
      json::object d;
      if (plan_.tool_call) {
        d["tool_calls"] = ToolCall(false, tokens_[i]);
      } else {
        d["content"] = tokens_[i];
      }
      json::object c = Chunk(std::move(d), nullptr);
      json::object& choice = c["choices"].as_array()[0].as_object();
      if (want_logprobs) choice["logprobs"] = Logprobs(i, i + 1);
      if (want_ids) choice["token_ids"] = json::array{TokenId(tokens_[i])};
      event(c);
    }
    event(Chunk(json::object(), json::string(finish())));
    if (include_usage) {
      json::object u = Envelope(json::object());
      u["choices"] = json::array();
      u["usage"] = usage_;
      event(u);
    }
    return events;
  }

 private:
  const char* finish() const { return plan_.tool_call ? "tool_calls" : "stop"; }

  json::object Logprobs(size_t from, size_t to) const {
    json::object lp;
    if (chat_) {
      json::array content;
      for (size_t i = from; i < to; ++i) {
        json::object e;
        e["token"] = tokens_[i];
        e["logprob"] = Logprob(i + offset_);
        e["bytes"] = json::array();
        e["top_logprobs"] = json::array();
        content.push_back(std::move(e));
      }
      lp["content"] = std::move(content);
    } else {
      json::array toks, lps;
      for (size_t i = from; i < to; ++i) {
        toks.push_back(json::string(tokens_[i]));
        lps.push_back(Logprob(i + offset_));
      }
      lp["tokens"] = std::move(toks);
      lp["token_logprobs"] = std::move(lps);
    }
    return lp;
  }

  json::array ToolCall(bool with_header, const std::string& args) const {
    json::object fn;
    if (with_header) fn["name"] = plan_.tool_name;
    fn["arguments"] = args;
    json::object call;
    call["index"] = 0;
    if (with_header) {
      call["id"] = call_id_;
      call["type"] = "function";
    }
    call["function"] = std::move(fn);
    return json::array{std::move(call)};
  }

  json::object Envelope(json::object choice) const {
    json::object out;
    out["id"] = id_;
    out["object"] = object_;
    out["created"] = created_;
    out["model"] = model_;
    out["choices"] = json::array{std::move(choice)};
    return out;
  }

  json::object Chunk(json::object delta, json::value finish_reason) const {
    json::object choice;
    choice["index"] = 0;
    if (chat_) {
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = delta.contains("content") ? delta["content"] : json::value("");
    }
    choice["finish_reason"] = std::move(finish_reason);
    return Envelope(std::move(choice));
  }

  const Plan& plan_;
  const bool chat_;
  const std::string model_;
  const std::vector<std::string> tokens_;
  const size_t offset_;  // tokens the reply already had (a continuation): logprobs are counted from there
  const std::string id_, call_id_;
  const int64_t created_;
  const char* const object_;
  json::object usage_;
};

}  // namespace

bool BoolOr(const json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

Reply BuildReply(const Options& options, int64_t n, bool chat, const json::object& body) {
  Reply r;
  Plan& plan = r.plan;
  ApplyFakeOverrides(options, n, body, plan);
  if (plan.status != 200) return r;
  const std::string model = body.contains("model") ? Str(body.if_contains("model")) : options.models.front();
  r.stream = BoolOr(body, "stream");
  const bool want_ids = BoolOr(body, "return_token_ids");
  const bool want_logprobs = chat ? BoolOr(body, "logprobs") : body.contains("logprobs");
  bool include_usage = false;
  if (auto* so = body.if_contains("stream_options"); so != nullptr && so->is_object()) {
    include_usage = BoolOr(so->as_object(), "include_usage");
  }
  const Prompt prompt = ReadPrompt(chat, body, plan);
  const std::string arguments = ChooseAction(options, n, chat, body, prompt, plan);
  std::vector<std::string> tokens = SplitTokens(plan.tool_call ? arguments : plan.reply);
  // vLLM's continue_final_message: the reply goes on after the assistant text it was given (when that text is
  // how the reply begins), and only the rest is generated.
  size_t offset = 0;
  if (chat && !plan.tool_call && prompt.last_role == "assistant" && BoolOr(body, "continue_final_message")) {
    const std::vector<std::string> given = SplitTokens(prompt.last_content);
    if (given.size() <= tokens.size() && std::equal(given.begin(), given.end(), tokens.begin())) offset = given.size();
    tokens.erase(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(offset));
    plan.reply = absl::StrJoin(tokens, "");
    r.continued_from = static_cast<int64_t>(offset);
  }
  const std::vector<std::string> prompt_tokens = SplitTokens(prompt.text);
  const AnswerWriter writer(plan, chat, r.stream, model, n, std::move(tokens), offset, prompt_tokens);
  if (r.stream) {
    r.events = writer.Events(want_logprobs, prompt_tokens, want_ids, include_usage);
  } else {
    r.whole = writer.Whole(arguments, want_logprobs, prompt_tokens, want_ids);
  }
  return r;
}

std::vector<std::string> AsNative(NativeApi api, const std::string& whole, bool stream) {
  const json::object completion = json::parse(whole).as_object();
  switch (api) {
    case NativeApi::kResponses:
      return stream ? ResponseEvents(completion) : std::vector<std::string>{json::serialize(ResponseOf(completion))};
    case NativeApi::kMessages:
      return stream ? MessageEvents(completion) : std::vector<std::string>{json::serialize(MessageOf(completion))};
    case NativeApi::kGemini:
      return stream ? GeminiEvents(completion)
                    : std::vector<std::string>{json::serialize(GenerateContentOf(completion))};
  }
  return {};
}

}  // namespace corral::fakellm
