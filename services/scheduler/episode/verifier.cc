// The verifier phase (agent runner, VERIFIER rewards): it starts from a clean slate, so that an agent that did
// not do the task has no way to the reward but the code under test. Before any verifier file is uploaded every
// process of the agent phase is killed (the sandbox's uid swept and checked), the reward directory is removed
// and made anew, and the task's replace_paths are removed; the verifier's files are then written fresh and the
// reward read only from what the verifier wrote (or printed, or its exit code). docs/reward-integrity.md.
// Coroutines here compute every co_await argument into a local first (GCC 12, see runners.cc).
#include "services/scheduler/episode/verifier.h"

#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/episode/episode_calls.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

constexpr char kVerifierDir[] = "/logs/verifier";

// A refusal of a path the agent phase could have shaped (a symlink put in its way, a file where a directory
// belongs): the agent's doing, so the episode ends without a reward and is not retried.
bool AgentShaped(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition || s.code() == absl::StatusCode::kPermissionDenied;
}

// Everything the agent phase left running is gone and nothing it wrote can pose as the verifier's.
asio::awaitable<std::optional<Failure>> CleanSlate(Attempt& a, absl::Time deadline) {
  const v1::Task& task = a.task();
  a.residents.StopAll();  // the tools' interpreters are the agent phase's too
  auto killed = co_await a.slot->client->KillAllProcesses(a.sandbox_id, a.Call(deadline));
  if (!killed.ok()) {
    co_return a.FromStatus(killed.status(), v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA,
                           "ending the agent phase's processes before the verifier");
  }
  if (*killed > 0)
    spdlog::debug("episode {}: {} process(es) of the agent phase killed", a.ticket.ids.episode_id(), *killed);
  // A sandbox without /logs (its task paths leave it out) has nowhere for reward files: INVALID_ARGUMENT, left
  // to the verifier, which then says so itself (or is judged by its exit code).
  if (absl::Status s = co_await a.slot->client->Remove(a.sandbox_id, kVerifierDir, true, a.Call(deadline)); !s.ok()) {
    if (AgentShaped(s)) {
      co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_VERIFIER,
                        absl::StrCat("the agent phase left ", kVerifierDir, " so it cannot be cleared (", s.message(),
                                     "); no reward")};
    }
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      co_return a.FromStatus(s, v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA, "clearing /logs/verifier");
    }
  }
  if (absl::Status s = co_await a.slot->client->MakeDir(a.sandbox_id, kVerifierDir, a.Call(deadline));
      !s.ok() && s.code() != absl::StatusCode::kInvalidArgument) {
    if (AgentShaped(s)) {
      co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_VERIFIER,
                        absl::StrCat("cannot make ", kVerifierDir, " (", s.message(), "); no reward")};
    }
    co_return a.FromStatus(s, v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA, "making /logs/verifier");
  }
  for (const std::string& path : task.verifier().replace_paths()) {
    absl::Status s = co_await a.slot->client->Remove(a.sandbox_id, path, true, a.Call(deadline));
    if (s.ok()) continue;
    if (AgentShaped(s) || s.code() == absl::StatusCode::kInvalidArgument) {
      co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_VERIFIER,
                        absl::StrCat("verifier.replace_paths '", path, "': ", s.message())};
    }
    co_return a.FromStatus(s, v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA, absl::StrCat("removing ", path));
  }
  co_return std::nullopt;
}

// The reward from what the verifier wrote under /logs/verifier (reward.txt, then reward.json), else its exit code.
asio::awaitable<absl::StatusOr<RewardOutcome>> RewardFromFiles(Attempt& a, std::optional<int> exit_code) {
  const absl::Time read_deadline = std::min(a.clock->Now() + absl::Seconds(30), a.EpisodeDeadline());
  const std::string txt_path = absl::StrCat(kVerifierDir, "/reward.txt");
  const std::string json_path = absl::StrCat(kVerifierDir, "/reward.json");
  auto txt = co_await a.slot->client->ReadFile(a.sandbox_id, txt_path, 4096, a.Call(read_deadline));
  std::optional<std::string> json_text;
  if (txt.ok() && !txt->has_value()) {
    auto j = co_await a.slot->client->ReadFile(a.sandbox_id, json_path, 1 << 20, a.Call(read_deadline));
    if (j.ok()) json_text = *j;
  }
  std::optional<std::string> txt_value;
  if (txt.ok()) txt_value = *txt;
  co_return VerifierReward(txt_value, json_text, exit_code);
}

}  // namespace

asio::awaitable<std::optional<Failure>> RunVerifier(Attempt& a) {
  a.control()->set_phase(RunPhase::kVerifier);
  const v1::Task& task = a.task();
  const absl::Duration timeout = a.Timeout(task.timeouts().verifier(), a.options->timeouts.verifier);
  const absl::Time deadline = std::min(a.clock->Now() + timeout, a.EpisodeDeadline());
  const absl::Time started = a.clock->Now();
  if (auto f = co_await CleanSlate(a, deadline)) co_return f;
  // Written fresh over whatever the agent left at their paths (a file is replaced, never written through), with
  // the task's answer for the verifier.
  std::vector<v1::InlineFile> files(task.verifier().files().begin(), task.verifier().files().end());
  v1::InlineFile task_json;
  task_json.set_path(kTaskJsonPath);
  task_json.set_content(TaskJson(task, a.ticket.ids, /*for_verifier=*/true));
  files.push_back(std::move(task_json));
  if (auto f = co_await Upload(a, files, deadline, v1::EPISODE_PHASE_VERIFIER)) co_return f;
  v1::Command command = task.verifier().command();
  if (command.argv().empty()) {
    command.add_argv("bash");
    command.add_argv("tests/test.sh");
  }
  command.clear_timeout();
  auto& env = *command.mutable_env();
  env["CORRAL_TASK_ID"] = task.id();
  // Python would import what the agent planted in the home's user site-packages (usercustomize.py, .pth files)
  // into the verifier's interpreter; a task may still ask for it.
  env.insert({"PYTHONNOUSERSITE", "1"});
  auto out = co_await Exec(a, std::move(command), "", deadline - a.clock->Now(), 4096);
  ToProto(a.clock->Now() - started, a.result.mutable_timings()->mutable_verifier());
  if (!out.ok())
    co_return a.FromStatus(out.status(), v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_VERIFIER, "verifier");
  a.result.set_verifier_output_tail(out->tail);
  if (out->exit.timed_out()) {
    co_return Failure{v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_VERIFIER, v1::EPISODE_PHASE_VERIFIER,
                      absl::StrCat("the verifier ran past its timeout (", absl::FormatDuration(timeout), ")")};
  }
  std::optional<int> exit_code;
  if (out->exit.signal() == 0) {
    exit_code = out->exit.exit_code();
    a.result.set_verifier_exit_code(*exit_code);
  }
  absl::StatusOr<RewardOutcome> reward = absl::UnknownError("");
  switch (task.verifier().reward_source()) {
    case v1::REWARD_SOURCE_STDOUT: reward = StdoutReward(out->stdout_tail, exit_code); break;
    case v1::REWARD_SOURCE_EXIT_CODE: reward = VerifierReward(std::nullopt, std::nullopt, exit_code); break;
    default: reward = co_await RewardFromFiles(a, exit_code);
  }
  if (!reward.ok()) {
    // Say how it ended, so a killed verifier is told from one that simply wrote nothing.
    const std::string ended = out->exit.signal() != 0
                                  ? absl::StrCat("; the verifier was killed by signal ", out->exit.signal(), " (",
                                                 v1::ExitReason_Name(out->exit.reason()), ")")
                                  : "";
    co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_VERIFIER, v1::EPISODE_PHASE_VERIFIER,
                      absl::StrCat(reward.status().message(), ended, "; output: ", out->tail.substr(0, 512))};
  }
  SetReward(a, *reward);
  co_return std::nullopt;
}

asio::awaitable<std::optional<Failure>> Reward(Attempt& a) {
  if (a.task().reward().function() == v1::REWARD_FUNCTION_VERIFIER) {
    a.control()->set_phase(RunPhase::kVerifier);
    v1::InlineFile final_message;
    final_message.set_path(".corral/final_message.txt");
    final_message.set_content(a.final_message);
    std::vector<v1::InlineFile> files = {final_message};
    const absl::Time deadline = a.Deadline(a.task().timeouts().verifier(), a.options->timeouts.verifier);
    if (auto f = co_await Upload(a, files, deadline, v1::EPISODE_PHASE_VERIFIER)) co_return f;
    co_return co_await RunVerifier(a);
  }
  a.control()->set_phase(RunPhase::kReward);
  SetReward(a, ComputeReward(a.task().reward(), a.task().answer(), a.final_message));
  co_return std::nullopt;
}

}  // namespace corral::scheduler
