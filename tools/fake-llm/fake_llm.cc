#include "tools/fake-llm/fake_llm.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "libs/async/sleep.h"
#include "libs/http/openai_json.h"
#include "tools/fake-llm/json_text.h"
#include "tools/fake-llm/native_messages.h"
#include "tools/fake-llm/native_responses.h"
#include "tools/fake-llm/shell_agent.h"

namespace corral::fakellm {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;

// What one request asks of the fake, after flags and its "fake" object.
struct Plan {
  int status = 200;
  absl::Duration ttft, inter_token;
  int64_t stall_after_chunks = -1;       // stop sending (keep the connection) after this many chunks
  int64_t disconnect_after_chunks = -1;  // close the connection after this many chunks
  std::string reply;
  bool tool_call = false;
  std::string tool_name;
};

int64_t IntOr(const json::object& o, const char* key, int64_t fallback) {
  auto* v = o.if_contains(key);
  return v != nullptr && v->is_int64() ? v->as_int64() : fallback;
}

bool BoolOr(const json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

std::string Json(const json::value& v) { return json::serialize(v); }

json::array Ids(const std::vector<std::string>& tokens) {
  json::array ids;
  for (const auto& t : tokens) ids.push_back(TokenId(t));
  return ids;
}

double Logprob(size_t i) { return -0.015625 * static_cast<double>(i % 64 + 1); }  // exact in float and double

}  // namespace

std::optional<ArithmeticPlan> PlanArithmetic(const std::string& last_user, const std::string& tool_property,
                                             const std::string* tool_output, int64_t seed) {
  // The first "A op B" in the text.
  size_t i = 0;
  int64_t a = 0, b = 0;
  char op = 0;
  bool found = false;
  for (; i < last_user.size() && !found; ++i) {
    if (!isdigit(static_cast<unsigned char>(last_user[i]))) continue;
    size_t j = i;
    a = 0;
    while (j < last_user.size() && isdigit(static_cast<unsigned char>(last_user[j])))
      a = a * 10 + (last_user[j++] - '0');
    while (j < last_user.size() && last_user[j] == ' ') ++j;
    if (j >= last_user.size() || std::string("+-*/").find(last_user[j]) == std::string::npos) {
      i = j;
      continue;
    }
    op = last_user[j++];
    while (j < last_user.size() && last_user[j] == ' ') ++j;
    if (j >= last_user.size() || !isdigit(static_cast<unsigned char>(last_user[j]))) continue;
    b = 0;
    while (j < last_user.size() && isdigit(static_cast<unsigned char>(last_user[j])))
      b = b * 10 + (last_user[j++] - '0');
    found = !(op == '/' && b == 0);
  }
  if (!found) return std::nullopt;
  const std::string expr = absl::StrCat(a, " ", std::string(1, op), " ", b);
  const bool wrong = ((static_cast<uint64_t>(seed) * 2654435761u) >> 7) % 4 == 0;
  ArithmeticPlan plan;
  if (tool_output != nullptr) {
    int64_t value = 0;
    std::string digits;
    for (char c : *tool_output) {
      if (isdigit(static_cast<unsigned char>(c)) || (c == '-' && digits.empty()))
        digits += c;
      else if (!digits.empty())
        break;
    }
    if (!absl::SimpleAtoi(digits, &value)) return ArithmeticPlan{false, "", "I could not compute it."};
    plan.reply = absl::StrCat("The answer is ", wrong ? value + 1 : value, ".");
    return plan;
  }
  if (tool_property == "code" || tool_property == "command") {
    plan.tool_call = true;
    json::object args;
    const std::string py_op = op == '/' ? "//" : std::string(1, op);
    args[tool_property] = tool_property == "code" ? absl::StrCat("print(", a, " ", py_op, " ", b, ")")
                                                  : absl::StrCat("echo $((", expr, "))");
    plan.arguments = json::serialize(args);
    return plan;
  }
  int64_t value = op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : a / b;
  plan.reply = absl::StrCat("Let me compute ", expr, ". #### ", wrong ? value + 1 : value);
  return plan;
}

std::vector<std::string> SplitTokens(const std::string& text) {
  // Words with their leading space, like a BPE vocabulary would: "a b" -> "a", " b".
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if ((c == ' ' || c == '\n') && !cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

int32_t TokenId(const std::string& token) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : token) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(1000 + h % 100000);
}

namespace {

// Everything one completion request gets, built outside any coroutine (GCC 12 miscompiles braced JSON
// initializers inside coroutine frames).
struct Reply {
  Plan plan;
  bool stream = false;
  std::string whole;                // non-streamed body
  std::vector<std::string> events;  // streamed: each a complete "data: ...\n\n" (without the final [DONE])
  int64_t continued_from = -1;      // a continuation of a final assistant message: the tokens it already had
};

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
  // schema property), then answers "done: <the last tool output>".
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
      if (tool_results < steps.size() && steps[tool_results].is_string()) {
        plan.tool_call = true;
        json::object args;
        args[p.tool_property.empty() ? "command" : p.tool_property] = steps[tool_results].as_string();
        arguments = json::serialize(args);
      } else {
        plan.tool_call = false;
        plan.reply = "done: " + last_tool;
      }
    }
  }
  if (options.shell_agent && chat) {
    if (auto a = PlanShellAgent(body)) {
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

// A chat completion (the fake's whole answer) as the Responses or the Messages API's answer: the body, or the
// stream's events.
std::vector<std::string> AsNative(bool responses, const std::string& whole, bool stream) {
  const json::object completion = json::parse(whole).as_object();
  if (!stream) return {json::serialize(responses ? ResponseOf(completion) : MessageOf(completion))};
  return responses ? ResponseEvents(completion) : MessageEvents(completion);
}

}  // namespace

asio::awaitable<void> FakeLlm::Handle(http::Request& request, http::Responder& responder) {
  const std::string target(request.target());
  if (target == "/health") {
    co_await responder.Send(200, "text/plain", "ok\n");
    co_return;
  }
  if (target == "/admin/version" && request.method() == boost::beast::http::verb::post) {
    // Stands for a weight update: the version this server reports serving from now on.
    boost::system::error_code ec;
    json::value v = json::parse(request.body(), ec);
    if (ec || !v.is_object() || !v.as_object().contains("version") || !v.as_object().at("version").is_int64()) {
      co_await responder.Send(400, "application/json",
                              http::ErrorJson("expected {\"version\": N}", "invalid_request_error"));
      co_return;
    }
    version_.store(v.as_object().at("version").as_int64());
    co_await responder.Send(200, "application/json", Stats());
    co_return;
  }
  if (target == "/admin/stats") {
    co_await responder.Send(200, "application/json", Stats());
    co_return;
  }
  if (!options_.request_log.empty() && request.method() == boost::beast::http::verb::post) {
    boost::system::error_code ec;
    json::value body = json::parse(request.body(), ec);
    if (!ec) {
      absl::MutexLock lock(&log_mu_);
      std::ofstream(options_.request_log, std::ios::app)
          << json::serialize(json::object{{"path", target}, {"body", body}}) << "\n";
    }
  }
  if (target == "/v1/models") {
    co_await responder.Send(200, "application/json", http::ModelListJson(options_.models, "corral-fake-llm"));
    co_return;
  }
  // An upstream that serves the Responses API itself (--native-responses) answers it as a chat call, reshaped.
  const bool native_responses = options_.native_responses && target == "/v1/responses";
  const bool native_messages = options_.native_messages && target == "/v1/messages";
  const bool native = native_responses || native_messages;
  const bool chat = target == "/v1/chat/completions" || native;
  if (!chat && target != "/v1/completions") {
    co_await responder.Send(404, "application/json", http::ErrorJson("no such route", "invalid_request_error"));
    co_return;
  }
  const int64_t n = ++requests_;
  if (std::optional<double> retry_after = OverQuota()) {
    const http::Fields headers = {
        {"retry-after", absl::StrCat(static_cast<int64_t>(std::ceil(*retry_after)))},
        {"retry-after-ms", absl::StrCat(static_cast<int64_t>(std::ceil(*retry_after * 1000)))}};
    co_await responder.Send(429, "application/json", http::ErrorJson("quota exceeded", "rate_limit_exceeded"), headers);
    co_return;
  }
  // The call counts against the concurrency quota until it is answered (or the client leaves).
  struct InFlight {
    FakeLlm* llm;
    ~InFlight() {
      absl::MutexLock lock(&llm->mu_);
      --llm->quota_.in_flight;
    }
  } in_flight{this};
  boost::system::error_code ec;
  json::value parsed = json::parse(request.body(), ec);
  if (ec || !parsed.is_object()) {
    co_await responder.Send(400, "application/json",
                            http::ErrorJson("body is not a JSON object", "invalid_request_error"));
    co_return;
  }
  const bool native_stream = native && BoolOr(parsed.as_object(), "stream");
  if (native) {
    ++(native_responses ? native_responses_ : native_messages_);
    parsed = native_responses ? ResponsesAsChat(parsed.as_object()) : MessagesAsChat(parsed.as_object());
  }
  const Reply reply = BuildReply(options_, n, chat, parsed.as_object());
  if (reply.continued_from >= 0) {
    absl::MutexLock lock(&mu_);
    continuations_.push_back({reply.continued_from, version_.load()});
  }
  co_await async::SleepFor(reply.plan.ttft);
  if (reply.plan.status != 200) {
    co_await responder.Send(reply.plan.status, "application/json", http::ErrorJson("injected failure", "server_error"));
    co_return;
  }
  if (native) {
    const std::vector<std::string> answer = AsNative(native_responses, reply.whole, native_stream);
    if (!native_stream) {
      co_await responder.Send(200, "application/json", answer.front());
      co_return;
    }
    if (!co_await responder.StartStream(200, "text/event-stream")) co_return;
    for (const std::string& event : answer) {
      co_await async::SleepFor(reply.plan.inter_token);
      if (!co_await responder.WriteChunk(event)) co_return;
    }
    co_await responder.EndStream();
    co_return;
  }
  if (!reply.stream) {
    co_await responder.Send(200, "application/json", reply.whole);
    co_return;
  }
  if (!co_await responder.StartStream(200, "text/event-stream")) co_return;
  for (size_t i = 0; i < reply.events.size(); ++i) {
    const auto chunks = static_cast<int64_t>(i);
    if (reply.plan.disconnect_after_chunks >= 0 && chunks >= reply.plan.disconnect_after_chunks) {
      responder.Abort();  // mid-stream, without the terminating chunk
      co_return;
    }
    if (reply.plan.stall_after_chunks >= 0 && chunks >= reply.plan.stall_after_chunks) {
      co_await async::SleepFor(absl::Hours(1));  // hold the stream open, silent (the client gives up first)
      co_return;
    }
    if (i > 1) co_await async::SleepFor(reply.plan.inter_token);
    if (!co_await responder.WriteChunk(reply.events[i])) {
      ++aborted_streams_;  // the client went away: generation stops, as vLLM's does
      co_return;
    }
  }
  co_await responder.WriteChunk("data: [DONE]\n\n");
  co_await responder.EndStream();
}

std::optional<double> FakeLlm::OverQuota() {
  absl::MutexLock lock(&mu_);
  Quota& q = quota_;
  const auto burst = static_cast<double>(options_.quota_burst);
  const bool rated = options_.quota_rps > 0;
  if (rated) {
    const absl::Time now = absl::Now();
    if (!q.requests) q.requests.emplace(burst, now);
    q.requests->Refill(now, options_.quota_rps, burst);
  }
  const bool rate_out = rated && !q.requests->Has(1);
  const bool busy = options_.quota_concurrency > 0 && q.in_flight >= options_.quota_concurrency;
  if (rate_out || busy) {
    ++q.throttled;
    return rate_out ? absl::ToDoubleSeconds(q.requests->TimeUntil(1, options_.quota_rps)) : 1.0;
  }
  if (rated) q.requests->Spend(1);
  q.max_in_flight = std::max(q.max_in_flight, ++q.in_flight);
  return std::nullopt;
}

std::string FakeLlm::Stats() const {
  json::object out;
  out["version"] = version_.load();
  out["requests"] = requests_.load();
  out["aborted_streams"] = aborted_streams_.load();
  out["native_responses"] = native_responses_.load();
  out["native_messages"] = native_messages_.load();
  json::array continuations;
  {
    absl::MutexLock lock(&mu_);
    out["throttled"] = quota_.throttled;
    out["max_in_flight"] = quota_.max_in_flight;
    for (const auto& [from, version] : continuations_) {
      json::object c;
      c["continued_from"] = from;
      c["version"] = version;
      continuations.push_back(std::move(c));
    }
  }
  out["continuations"] = std::move(continuations);
  return json::serialize(out);
}

}  // namespace corral::fakellm
