// Coroutines here compute every co_await argument into a local first: GCC 12 double-destroys conditional
// temporaries in co_await expressions.
#include "services/scheduler/episode/episode_calls.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"

namespace corral::scheduler {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {
using StopChannel = asio::experimental::concurrent_channel<void(boost::system::error_code)>;
}  // namespace

std::string ModelOf(const Attempt& a) {
  if (!a.model.empty()) return a.model;
  return !a.task().llm().model().empty() ? a.task().llm().model() : a.options->default_model;
}

asio::awaitable<void> UntilGenerationDeadline(const Attempt& a, std::function<absl::Time()> deadline) {
  while (true) {
    const absl::Time now = a.clock->Now();
    const absl::Time end = deadline();
    if (now >= end && !a.Paused()) co_return;
    // At least 100 ms (the deadline stands still while paused), at most a minute (a far or infinite deadline).
    co_await async::SleepFor(*a.clock, std::clamp(end - now, absl::Milliseconds(100), absl::Minutes(1)));
  }
}

asio::awaitable<void> StopAtAgentDeadline(const Attempt& a) {
  co_await UntilGenerationDeadline(a, [&a] { return a.AgentDeadline(); });
  a.control()->Stop(StopReason::kTimeout, "");
}

asio::awaitable<absl::StatusOr<ratelimiter::Permit>> TakePermit(Attempt& a, const std::string& limit,
                                                                const std::string& key, absl::Duration wait) {
  if (a.limiter == nullptr || limit.empty()) co_return ratelimiter::Permit();
  co_return co_await a.limiter->Acquire(limit, key, wait, a.control());
}

asio::awaitable<ChatOutcome> Chat(Attempt& a, const json::array& messages, const json::array& tools) {
  ChatOutcome out;
  const std::string body = ChatBody(ModelOf(a), a.task().llm().params_json(), messages, tools);
  const absl::Time started = a.clock->Now();
  const absl::Duration timeout = std::min(a.options->llm_call_timeout, a.AgentDeadline() - started);
  const std::string token = a.session.env_token();
  // A stop abandons the call at once: the request is cancelled (its connection closed). The channel is
  // thread-safe, and holds the stop if it comes before the wait starts.
  auto executor = co_await asio::this_coro::executor;
  auto stopped = std::make_shared<StopChannel>(executor, 1);
  async::ScopedInterrupt interrupt(a.control(), [stopped] { stopped->try_send(boost::system::error_code()); });
  // The LLM limit's permit is held for exactly the call (queueing for it counts against the call's timeout).
  const std::string model = ModelOf(a).empty() ? "default" : ModelOf(a);  // no model: the proxy's alias decides
  auto permit = co_await TakePermit(a, a.options->llm_limit, model, timeout);
  if (!permit.ok()) {
    const bool waited_out = permit.status().code() == absl::StatusCode::kDeadlineExceeded;
    out.failure = a.FromStatus(permit.status(), v1::EPISODE_PHASE_AGENT,
                               waited_out ? v1::FAILURE_CLASS_AGENT : v1::FAILURE_CLASS_INFRA,
                               absl::StrCat("permit ", a.options->llm_limit, "/", model));
    co_return out;
  }
  // The call's time limit counts generation time: a call the proxies hold during a pause waits it out. The
  // HTTP exchange itself only gets a stall bound far beyond it.
  using namespace asio::experimental::awaitable_operators;
  auto call_deadline = [&a, started, timeout] {
    return std::min(started + timeout + a.PausedSince(started), a.AgentDeadline());
  };
  auto raced = co_await (a.proxy->Post(a.base, token, "/chat/completions", body, timeout + kPauseSlack) ||
                         stopped->async_receive(asio::as_tuple(asio::use_awaitable)) ||
                         UntilGenerationDeadline(a, call_deadline));
  permit->Release();
  if (raced.index() == 1) {
    out.failure = StoppedFailure(a, v1::EPISODE_PHASE_AGENT, "LLM call");
    co_return out;
  }
  if (raced.index() == 2) {
    out.failure = a.FromStatus(absl::DeadlineExceededError("no answer in time"), v1::EPISODE_PHASE_AGENT,
                               v1::FAILURE_CLASS_AGENT, "LLM call");
    co_return out;
  }
  auto reply = std::get<0>(std::move(raced));
  a.result.set_llm_calls(a.result.llm_calls() + 1);
  if (!reply.ok()) {
    const bool timed_out =
        a.clock->Now() >= a.AgentDeadline() || reply.status().code() == absl::StatusCode::kDeadlineExceeded;
    out.failure = timed_out
                      ? a.FromStatus(absl::DeadlineExceededError(reply.status().message()), v1::EPISODE_PHASE_AGENT,
                                     v1::FAILURE_CLASS_AGENT, "LLM call")
                      : a.FromStatus(reply.status(), v1::EPISODE_PHASE_AGENT, v1::FAILURE_CLASS_INFRA, "LLM call");
    co_return out;
  }
  if (IsBudgetExhausted(reply->status, reply->body)) {
    out.budget_exhausted = true;
    co_return out;
  }
  if (reply->status != 200) {
    Failure f;
    f.phase = v1::EPISODE_PHASE_AGENT;
    f.failure_class = reply->status >= 500 || reply->status == 410 ? v1::FAILURE_CLASS_INFRA : v1::FAILURE_CLASS_AGENT;
    f.message = absl::StrCat("LLM call: HTTP ", reply->status, ": ", ErrorMessage(reply->body));
    out.failure = f;
    co_return out;
  }
  auto parsed = ParseChatReply(reply->body);
  if (!parsed.ok()) {
    out.failure = Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_AGENT,
                          absl::StrCat("LLM call: ", parsed.status().message())};
    co_return out;
  }
  out.reply = *std::move(parsed);
  co_return out;
}

void SetReward(Attempt& a, const RewardOutcome& r) {
  a.result.set_reward(r.reward);
  a.result.clear_step_rewards();
  for (double s : r.step_rewards) a.result.add_step_rewards(s);
  a.result.set_reward_details_json(r.details_json);
}

asio::awaitable<absl::StatusOr<sandbox::ExecOutcome>> Exec(Attempt& a, v1::Command command, std::string stdin_data,
                                                           absl::Duration timeout, size_t output_limit,
                                                           bool host_keeps_time) {
  v1::ExecRequest request;
  request.set_sandbox_id(a.sandbox_id);
  *request.mutable_command() = std::move(command);
  if (request.command().cwd().empty()) request.mutable_command()->set_cwd(a.workdir);
  ToProto(host_keeps_time ? timeout : std::max(timeout, a.slot->max_exec_timeout),
          request.mutable_command()->mutable_timeout());
  request.set_stdin(std::move(stdin_data));
  // The host kills the process at `timeout`; the call's own deadline leaves it time to report that.
  const absl::Time deadline = host_keeps_time
                                  ? std::min(a.clock->Now() + timeout + absl::Seconds(10), a.EpisodeDeadline())
                                  : absl::InfiniteFuture();
  co_return co_await a.slot->client->Exec(std::move(request), output_limit, a.Call(deadline));
}

asio::awaitable<std::optional<Failure>> Upload(Attempt& a, const std::vector<v1::InlineFile>& files,
                                               absl::Time deadline, v1::EpisodePhase phase) {
  for (const auto& f : files) {
    absl::Status s = co_await a.slot->client->WriteFile(a.sandbox_id, f, a.Call(deadline));
    if (!s.ok()) co_return a.FromStatus(s, phase, v1::FAILURE_CLASS_INFRA, absl::StrCat("uploading ", f.path()));
  }
  co_return std::nullopt;
}

std::string TaskJson(const v1::Task& task, const v1::EpisodeIds& ids, bool for_verifier) {
  json::object o;
  o["id"] = task.id();
  o["episode_id"] = ids.episode_id();
  o["seed"] = ids.seed();
  if (for_verifier) {
    o["answer"] = task.answer();
    boost::system::error_code ec;
    json::value metadata =
        task.metadata_json().empty() ? json::value(json::object()) : json::parse(task.metadata_json(), ec);
    o["metadata"] = ec ? json::value(json::object()) : metadata;
  }
  return json::serialize(o);
}

std::string InstructionPath(const v1::Task& task) {
  return task.agent().instruction_path().empty() ? ".corral/instruction.md" : task.agent().instruction_path();
}

Failure StoppedFailure(const Attempt& a, v1::EpisodePhase phase, const std::string& what) {
  return a.FromStatus(absl::CancelledError("stopped"), phase, v1::FAILURE_CLASS_INFRA, what);
}

Failure EnvironmentFailure(v1::FailureClass failure_class, std::string message) {
  return Failure{v1::EPISODE_STATUS_FAILED, failure_class, v1::EPISODE_PHASE_ENVIRONMENT, std::move(message)};
}

}  // namespace corral::scheduler
