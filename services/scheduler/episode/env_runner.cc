// The environment runner: an environment server in the episode's sandbox, driven turn by turn — reset with the
// episode's seed, then the model's reply as an action, the observation as the next message, until the
// environment says done, max_turns, or a timeout. Or, for a trainer-driven episode (OpenEnvironment), the
// trainer's actions in place of the model's replies. Coroutines here compute every co_await argument into a local
// first (GCC 12, see runners.cc).
#include <variant>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "services/scheduler/episode/env_board.h"
#include "services/scheduler/episode/env_protocol.h"
#include "services/scheduler/episode/env_relay.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/verifier.h"

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

// A reset or step (`kind`) with `body`, over the episode's transport, and its answer checked; the time it took
// counts as tool time.
asio::awaitable<std::variant<EnvAnswer, Failure>> Post(Attempt& a, const std::string& kind, const std::string& body,
                                                       absl::Duration timeout) {
  using Out = std::variant<EnvAnswer, Failure>;
  const PhaseScope phase(a.control(), RunPhase::kTool);
  const absl::Time started = a.clock->Now();
  auto reply = co_await EnvCall(a, kind, body, timeout);
  a.ToolRan(absl::StrCat("env:", kind), a.clock->Now() - started);
  if (auto* f = std::get_if<Failure>(&reply)) co_return Out(*f);
  const EnvHttpReply& http = std::get<EnvHttpReply>(reply);
  const std::string& call = http.call;
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

// The episode's reward once the steps are over: the task's reward function when it names one, else the
// environment's (the steps' sum or last); the step rewards either way.
asio::awaitable<std::optional<Failure>> Conclude(Attempt& a, const v1::EnvServerSpec& spec,
                                                 const std::vector<double>& step_rewards, bool done) {
  if (a.task().reward().function() != v1::REWARD_FUNCTION_UNSPECIFIED) {
    if (auto f = co_await Reward(a)) co_return f;
  } else {
    json::object details;
    details["steps"] = step_rewards.size();
    details["done"] = done;
    details["reward_mode"] = spec.reward_mode() == v1::ENV_REWARD_MODE_LAST ? "last" : "sum";
    SetReward(a, RewardOutcome{EnvReward(spec, step_rewards), {}, json::serialize(details)});
  }
  a.result.clear_step_rewards();
  for (double r : step_rewards) a.result.add_step_rewards(r);
  co_return std::nullopt;
}

// ---- trainer-driven (OpenEnvironment): the trainer sends the actions ----

v1::EnvironmentStep StepOf(const EnvAnswer& answer, int64_t turn, int64_t max_turns) {
  v1::EnvironmentStep s;
  s.set_observation_json(json::serialize(answer.observation));
  if (answer.reward) s.set_reward(*answer.reward);
  s.set_done(answer.done);
  s.set_truncated(!answer.done && turn >= max_turns);
  s.set_turn(static_cast<uint32_t>(turn));
  s.set_answer_json(json::serialize(answer.raw));
  return s;
}

// The trainer's next command, or why none came: its idle timeout, the agent timeout (later by generation
// pauses, so it is read again at each wake-up), or a stop (which closes the channel).
asio::awaitable<std::variant<EnvCommand, Failure>> NextCommand(Attempt& a, EnvBoard::Channel& commands,
                                                               absl::Duration idle) {
  using Out = std::variant<EnvCommand, Failure>;
  using namespace asio::experimental::awaitable_operators;
  const absl::Time idle_end = a.clock->Now() + idle;
  while (true) {
    const absl::Time until = std::min(idle_end, a.AgentDeadline());
    auto raced =
        co_await (commands.async_receive(asio::as_tuple(asio::use_awaitable)) || async::SleepUntil(*a.clock, until));
    if (raced.index() == 0) {
      auto [ec, command] = std::get<0>(std::move(raced));
      if (ec) {
        co_return Out(StoppedFailure(a, v1::EPISODE_PHASE_AGENT, "waiting for the trainer"));
      }
      co_return Out(std::move(command));
    }
    const absl::Time now = a.clock->Now();
    if (now >= idle_end) {
      co_return Out(Failure{
          v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_AGENT,
          absl::StrCat("no step or close from the trainer for ", absl::FormatDuration(idle), " (idle_timeout)")});
    }
    if (now >= a.AgentDeadline()) {
      co_return Out(a.FromStatus(absl::DeadlineExceededError("the agent timeout passed"), v1::EPISODE_PHASE_AGENT,
                                 v1::FAILURE_CLASS_AGENT, "waiting for the trainer"));
    }
  }
}

// After the reset: answers the trainer's Open, then takes its steps one at a time until it closes. Every
// failure from here on is final (the trainer holds the episode's state: a retry could not resume it).
asio::awaitable<std::optional<Failure>> DriveForTrainer(Attempt& a, const v1::EnvServerSpec& spec,
                                                        absl::Duration step_timeout, absl::Duration idle,
                                                        EnvAnswer answer) {
  const std::string& id = a.ticket.ids.episode_id();
  const int64_t max_turns = spec.max_turns() == 0 ? a.options->default_max_turns : spec.max_turns();
  v1::OpenEnvironmentResponse opened;
  *opened.mutable_ids() = a.ticket.ids;
  *opened.mutable_reset() = StepOf(answer, 0, max_turns);
  opened.set_base_url(a.session.base_url());
  opened.set_api_key(a.session.env_token());
  opened.set_model(a.model);
  opened.set_host_address(a.result.host_address());
  opened.set_sandbox_id(a.sandbox_id);
  a.control()->set_final();
  auto executor = co_await asio::this_coro::executor;
  std::shared_ptr<EnvBoard::Channel> commands = a.envs->Opened(id, opened, executor);
  if (commands == nullptr) {
    co_return Failure{v1::EPISODE_STATUS_CANCELLED, v1::FAILURE_CLASS_UNSPECIFIED, v1::EPISODE_PHASE_AGENT,
                      "the trainer stopped waiting before the environment was reset"};
  }
  async::ScopedInterrupt interrupt(a.control(), [commands] { commands->close(); });
  std::vector<double> step_rewards;
  int64_t turn = 0;
  while (true) {
    auto next = co_await NextCommand(a, *commands, idle);
    if (auto* f = std::get_if<Failure>(&next)) co_return *f;
    EnvCommand command = std::get<EnvCommand>(std::move(next));
    if (command.close) {
      a.final_message = std::move(command.final_message);
      break;
    }
    if (answer.done || turn >= max_turns) {
      a.envs->Answer(
          id, absl::FailedPreconditionError(answer.done ? "the environment is done: close the episode"
                                                        : absl::StrCat("the episode took its max_turns (", max_turns,
                                                                       ") steps: close the episode")));
      continue;
    }
    boost::system::error_code ec;
    const json::value action = json::parse(command.action_json, ec);  // checked by the board
    const std::string body = StepBody(action);
    auto step = co_await Post(a, "step", body, step_timeout);
    if (auto* f = std::get_if<Failure>(&step)) co_return *f;
    answer = std::get<EnvAnswer>(std::move(step));
    ++turn;
    step_rewards.push_back(answer.reward.value_or(0));
    a.envs->Answer(id, StepOf(answer, turn, max_turns));
  }
  co_return co_await Conclude(a, spec, step_rewards, answer.done);
}

}  // namespace

asio::awaitable<std::optional<Failure>> RunEnvironment(Attempt& a) {
  const v1::EnvServerSpec& spec = a.task().env_server();
  std::optional<absl::Duration> idle;
  if (spec.trainer_driven()) {
    idle = a.envs != nullptr ? a.envs->Expected(a.ticket.ids.episode_id()) : std::nullopt;
    if (!idle) {
      a.control()->set_final();
      co_return EnvironmentFailure(v1::FAILURE_CLASS_INFRA,
                                   "no trainer holds this environment episode any more: it was opened before the "
                                   "scheduler restarted (open it again)");
    }
  }
  if (auto f = co_await StartEnvServer(a, spec)) co_return f;
  const absl::Duration step_timeout = spec.has_step_timeout()
                                          ? FromProto(spec.step_timeout())
                                          : a.Timeout(a.task().timeouts().tool(), a.options->timeouts.tool);

  const std::string reset_body = ResetBody(a.ticket.ids.seed(), a.ticket.ids.episode_id(), spec.reset_json());
  auto reset = co_await Post(a, "reset", reset_body, step_timeout);
  if (auto* f = std::get_if<Failure>(&reset)) co_return *f;
  EnvAnswer answer = std::get<EnvAnswer>(std::move(reset));
  if (idle) co_return co_await DriveForTrainer(a, spec, step_timeout, *idle, std::move(answer));

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
    auto step = co_await Post(a, "step", step_body, step_timeout);
    if (auto* f = std::get_if<Failure>(&step)) co_return *f;
    answer = std::get<EnvAnswer>(std::move(step));
    step_rewards.push_back(answer.reward.value_or(0));
    Answer(messages, reply, ObservationText(spec, answer));
    if (a.clock->Now() >= a.AgentDeadline()) {
      co_return a.FromStatus(absl::DeadlineExceededError("the conversation ran past its timeout"),
                             v1::EPISODE_PHASE_AGENT, v1::FAILURE_CLASS_AGENT, "conversation");
    }
  }
  co_return co_await Conclude(a, spec, step_rewards, answer.done);
}

}  // namespace corral::scheduler
