// The environment runner: an environment server in the episode's sandbox, driven turn by turn — reset with the
// episode's seed, then the model's reply as an action, the observation as the next message, until the
// environment says done, max_turns, or a timeout. Coroutines here compute every co_await argument into a local
// first (GCC 12, see runners.cc).
#include <variant>

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "services/scheduler/episode/env_protocol.h"
#include "services/scheduler/episode/env_relay.h"
#include "services/scheduler/episode/runners.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;

json::object UserMessage(const std::string& text) {
  json::object m;
  m["role"] = "user";
  m["content"] = text;
  return m;
}

// Posts `body` to `path` and checks the answer; the time it took counts as tool time.
asio::awaitable<std::variant<EnvAnswer, Failure>> Post(Attempt& a, const std::string& path, const std::string& body,
                                                       absl::Duration timeout) {
  using Out = std::variant<EnvAnswer, Failure>;
  const PhaseScope phase(a.control(), RunPhase::kTool);
  const absl::Time started = a.clock->Now();
  auto reply = co_await EnvRequest(a, "POST", path, body, timeout);
  a.tools_time += a.clock->Now() - started;
  if (auto* f = std::get_if<Failure>(&reply)) co_return Out(*f);
  const EnvHttpReply& http = std::get<EnvHttpReply>(reply);
  const std::string call = absl::StrCat("POST ", path);
  if (http.status != 200) {
    co_return Out(EnvironmentFailure(
        v1::FAILURE_CLASS_ENVIRONMENT,
        absl::StrCat("the environment answered ", call, " with HTTP ", http.status, ": ", http.body.substr(0, 300))));
  }
  auto answer = ParseEnvAnswer(call, http.body);
  if (!answer.ok())
    co_return Out(EnvironmentFailure(v1::FAILURE_CLASS_ENVIRONMENT, std::string(answer.status().message())));
  a.output.Append(absl::StrCat(call, " -> reward ", answer->reward ? absl::StrCat(*answer->reward) : "null",
                               answer->done ? ", done\n" : "\n"));
  co_return Out(*std::move(answer));
}

// Appends `text` for the model: as the answer to each of the reply's tool calls (the first gets `text`, the
// others a note that only one action is taken per turn), else as a user message.
void Answer(json::array& messages, const ChatReply& reply, const std::string& text) {
  if (reply.tool_calls.empty()) {
    messages.push_back(UserMessage(text));
    return;
  }
  for (size_t i = 0; i < reply.tool_calls.size(); ++i) {
    messages.push_back(
        ToolMessage(reply.tool_calls[i].id, i == 0 ? text : "error: one action per turn; this call was not taken"));
  }
}

}  // namespace

asio::awaitable<std::optional<Failure>> RunEnvironment(Attempt& a) {
  const v1::EnvServerSpec& spec = a.task().env_server();
  if (auto f = co_await StartEnvServer(a, spec)) co_return f;
  const absl::Duration step_timeout = spec.has_step_timeout()
                                          ? FromProto(spec.step_timeout())
                                          : a.Timeout(a.task().timeouts().tool(), a.options->timeouts.tool);

  const std::string reset_body = ResetBody(a.ticket.ids.seed(), a.ticket.ids.episode_id(), spec.reset_json());
  auto reset = co_await Post(a, "/reset", reset_body, step_timeout);
  if (auto* f = std::get_if<Failure>(&reset)) co_return *f;
  EnvAnswer answer = std::get<EnvAnswer>(std::move(reset));

  json::array messages;
  if (!a.task().prompt().empty() || !a.task().messages().empty()) messages = InitialMessages(a.task());
  messages.push_back(UserMessage(ObservationText(spec, answer)));
  json::array tools;
  if (!spec.tools_json().empty()) tools = json::parse(spec.tools_json()).as_array();  // checked at submission
  const int64_t max_turns = spec.max_turns() == 0 ? a.options->default_max_turns : spec.max_turns();
  std::vector<double> step_rewards;
  int64_t turn = 0;
  for (; turn < max_turns && !answer.done; ++turn) {
    ChatOutcome out = co_await Chat(a, messages, tools);
    if (out.failure) co_return out.failure;
    if (out.budget_exhausted) break;
    const ChatReply& reply = *out.reply;
    messages.push_back(reply.message);
    a.final_message = reply.content;
    auto action = ActionOf(spec, reply);
    if (!action.ok()) {  // the model's fault: it reads why, and the turn is spent
      Answer(messages, reply, absl::StrCat("error: ", action.status().message()));
      continue;
    }
    if (!reply.tool_calls.empty()) a.result.set_tool_calls(a.result.tool_calls() + 1);
    const std::string step_body = StepBody(*action);
    auto step = co_await Post(a, "/step", step_body, step_timeout);
    if (auto* f = std::get_if<Failure>(&step)) co_return *f;
    answer = std::get<EnvAnswer>(std::move(step));
    step_rewards.push_back(answer.reward.value_or(0));
    Answer(messages, reply, ObservationText(spec, answer));
    if (a.clock->Now() >= a.AgentDeadline()) {
      co_return a.FromStatus(absl::DeadlineExceededError("the conversation ran past its timeout"),
                             v1::EPISODE_PHASE_AGENT, v1::FAILURE_CLASS_AGENT, "conversation");
    }
  }
  if (a.task().reward().function() != v1::REWARD_FUNCTION_UNSPECIFIED) {
    if (auto f = co_await Reward(a)) co_return f;
  } else {
    json::object details;
    details["steps"] = step_rewards.size();
    details["done"] = answer.done;
    details["reward_mode"] = spec.reward_mode() == v1::ENV_REWARD_MODE_LAST ? "last" : "sum";
    SetReward(a, RewardOutcome{EnvReward(spec, step_rewards), {}, json::serialize(details)});
  }
  a.result.clear_step_rewards();
  for (double r : step_rewards) a.result.add_step_rewards(r);
  co_return std::nullopt;
}

}  // namespace corral::scheduler
