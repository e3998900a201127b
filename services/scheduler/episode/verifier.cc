// The verifier phase (agent runner, VERIFIER rewards): it starts from a clean slate, so that an agent that did
// not do the task has no way to the reward but the code under test. Before any verifier file is uploaded every
// process of the agent phase is killed (the sandbox's uid swept and checked), the reward directory is removed
// and made anew, and the task's replace_paths are removed; the verifier's files are then written fresh and the
// reward read only from what the verifier wrote (or printed, or its exit code). Under CLEAN_ENV (the default) it
// runs in an environment the agent never shaped and every process it started is ended before the reward is
// read; a verifier that could not start (exit 126/127, nothing written) is a verifier failure, never a reward.
// docs/reward-integrity.md.
// Coroutines here compute every co_await argument into a local first (GCC 12, see runners.cc).
#include "services/scheduler/episode/verifier.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "libs/api/proto_digest.h"
#include "libs/api/proto_time.h"
#include "libs/core/logging.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/resident_process.h"
#include "services/scheduler/episode/verifier_hygiene.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

constexpr char kVerifierDir[] = "/logs/verifier";
// The verifier's HOME under CLEAN_ENV, relative to the sandbox's home: made empty before it runs.
constexpr char kVerifierHome[] = ".corral/verifier-home";
// Where its sitecustomize.py goes (on PYTHONPATH), relative to the sandbox's home: made empty before it runs.
constexpr char kVerifierPython[] = ".corral/verifier-python";

// A refusal of a path the agent phase could have shaped (a symlink put in its way, a file where a directory
// belongs): the agent's doing, so the episode ends without a reward and is not retried.
bool AgentShaped(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition || s.code() == absl::StatusCode::kPermissionDenied;
}

// `path` removed (a link put in its place is removed, not followed) and, with `make`, made anew, empty (without,
// the upload of a file into it makes it). A sandbox without /logs (its task paths leave it out) has nowhere for
// reward files: INVALID_ARGUMENT, left to the verifier, which then says so itself (or is judged by its exit code).
asio::awaitable<std::optional<Failure>> FreshDirectory(Attempt& a, std::string path, absl::Time deadline,
                                                       bool make = true) {
  if (absl::Status s = co_await a.slot->client->Remove(a.sandbox_id, path, true, a.Call(deadline)); !s.ok()) {
    if (AgentShaped(s)) {
      co_return Failure{
          v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_VERIFIER,
          absl::StrCat("the agent phase left ", path, " so it cannot be cleared (", s.message(), "); no reward")};
    }
    if (s.code() != absl::StatusCode::kInvalidArgument) {
      co_return a.FromStatus(s, v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA, absl::StrCat("clearing ", path));
    }
  }
  if (!make) co_return std::nullopt;
  if (absl::Status s = co_await a.slot->client->MakeDir(a.sandbox_id, path, a.Call(deadline));
      !s.ok() && s.code() != absl::StatusCode::kInvalidArgument) {
    if (AgentShaped(s)) {
      co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_VERIFIER,
                        absl::StrCat("cannot make ", path, " (", s.message(), "); no reward")};
    }
    co_return a.FromStatus(s, v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA, absl::StrCat("making ", path));
  }
  co_return std::nullopt;
}

// Everything the agent phase left running is gone: nothing it started may touch what the verifier is given.
asio::awaitable<std::optional<Failure>> EndAgentPhase(Attempt& a, absl::Time deadline) {
  a.residents.StopAll();  // the tools' interpreters are the agent phase's too
  auto killed = co_await a.slot->client->KillAllProcesses(a.sandbox_id, a.Call(deadline));
  if (!killed.ok()) {
    co_return a.FromStatus(killed.status(), v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA,
                           "ending the agent phase's processes before the verifier");
  }
  if (*killed > 0)
    spdlog::debug("episode {}: {} process(es) of the agent phase killed", a.ticket.ids.episode_id(), *killed);
  co_return std::nullopt;
}

// Nothing the agent wrote can pose as the verifier's: an empty /logs/verifier, the task's replace_paths gone.
asio::awaitable<std::optional<Failure>> ClearVerifierPaths(Attempt& a, absl::Time deadline) {
  if (auto f = co_await FreshDirectory(a, kVerifierDir, deadline)) co_return f;
  for (const std::string& path : a.task().verifier().replace_paths()) {
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

// SEPARATE_UID: the verifier's own sandbox, a fork of the agent's made once nothing of the agent runs.
// FAILED_PRECONDITION when the host cannot fork; RESOURCE_EXHAUSTED when it has no room.
asio::awaitable<absl::StatusOr<std::string>> ForkForVerifier(Attempt& a, absl::Time deadline) {
  v1::ForkSandboxRequest request;
  request.set_sandbox_id(a.sandbox_id);
  request.set_count(1);
  (*request.mutable_labels())["corral.verifier_of"] = a.ticket.ids.episode_id();
  request.set_empty_tmp(true);  // nothing the agent left in /tmp reaches the verifier
  ToProto(absl::Seconds(10), request.mutable_wait_timeout());
  auto out = co_await a.slot->client->Fork(std::move(request), sandbox::CallOptions{nullptr, deadline});
  if (!out.ok()) co_return out.status();
  if (out->sandboxes_size() == 0) {
    co_return absl::ResourceExhaustedError(
        absl::StrCat("no room for the verifier's fork (", out->rejected_reason(), ")"));
  }
  co_return out->sandboxes(0).sandbox().sandbox_id();
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
  auto reward = VerifierReward(txt_value, json_text, exit_code);
  if (reward.ok()) {
    const std::optional<std::string>& file = reward->source == "reward.txt" ? txt_value : json_text;
    if (reward->source != "exit_code" && file) {
      a.result.mutable_verifier_evidence()->set_reward_file_sha256(Sha256Hex(*file));
    }
  }
  co_return reward;
}

// The verifier in `a.sandbox_id` (the agent's sandbox, or its fork), from its files to its reward.
asio::awaitable<std::optional<Failure>> Verify(Attempt& a, v1::VerifierIsolation isolation, absl::Duration timeout,
                                               absl::Time deadline, absl::Time started) {
  const v1::Task& task = a.task();
  if (auto f = co_await ClearVerifierPaths(a, deadline)) co_return f;
  // Written fresh over whatever the agent left at their paths (a file is replaced, never written through), with
  // the task's answer for the verifier.
  std::vector<v1::InlineFile> files = VerifierFiles(task.verifier(), a.workdir);
  const std::string own_dir = OwnDirectory(files);
  v1::InlineFile task_json;
  task_json.set_path(kTaskJsonPath);
  task_json.set_content(TaskJson(task, a.ticket.ids, /*for_verifier=*/true));
  const size_t task_json_index = files.size();
  files.push_back(std::move(task_json));
  if (auto f = co_await Upload(a, files, deadline, v1::EPISODE_PHASE_VERIFIER)) co_return f;
  // CLEAN_ENV: a fresh HOME, and a fresh directory for the sitecustomize.py that puts the working and script
  // directories last on Python's path (verifier_hygiene.h); both in .corral/, which task.json's upload made. Each
  // is removed, and made again by the upload of its file below (WriteFile makes missing parents).
  const bool clean = isolation != v1::VERIFIER_ISOLATION_SHARED;
  if (clean) {
    for (const char* dir : {kVerifierHome, kVerifierPython}) {
      if (auto f = co_await FreshDirectory(a, dir, deadline, /*make=*/false)) co_return f;
    }
    v1::InlineFile site;
    site.set_path(absl::StrCat(kVerifierPython, "/sitecustomize.py"));
    site.set_content(EpisodeScript("verifier_sitecustomize.py"));
    // $HOME/.corral/task.json is where a verifier finds the task (its answer) in any HOME.
    v1::InlineFile home_task_json = files[task_json_index];
    home_task_json.set_path(absl::StrCat(kVerifierHome, "/", kTaskJsonPath));
    const std::vector<v1::InlineFile> own = {site, home_task_json};
    if (auto f = co_await Upload(a, own, deadline, v1::EPISODE_PHASE_VERIFIER)) co_return f;
  }
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
  if (clean) MakeEnvClean(command, own_dir);
  v1::VerifierEvidence& evidence = *a.result.mutable_verifier_evidence();
  evidence.set_isolation(isolation);
  const bool own_sandbox = isolation == v1::VERIFIER_ISOLATION_SEPARATE_UID;
  if (!own_sandbox) {  // it shares the agent's sandbox: its CPU is the difference at the end (Conclude)
    auto before = co_await a.slot->client->Get(a.sandbox_id, absl::Seconds(5));
    if (before.ok() && before->usage().has_cpu_time()) a.cpu_before_verifier = FromProto(before->usage().cpu_time());
  }
  auto out = co_await Exec(a, std::move(command), "", deadline - a.clock->Now(), 4096);
  ToProto(a.clock->Now() - started, a.result.mutable_timings()->mutable_verifier());
  *a.result.mutable_usage()->mutable_verifier()->mutable_wall_time() = a.result.timings().verifier();
  a.result.mutable_usage()->mutable_verifier()->set_in_episode_sandbox(!own_sandbox);
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
  // Nothing the verifier phase started (a hook, a daemon) may write the reward while it is read.
  if (clean) {
    auto ended = co_await a.slot->client->KillAllProcesses(a.sandbox_id, a.Call(deadline));
    if (!ended.ok()) {
      co_return a.FromStatus(ended.status(), v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA,
                             "ending the verifier phase's processes before the reward is read");
    }
    evidence.set_processes_ended(*ended);
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
  if (auto f = CouldNotRun(*reward, exit_code, out->tail)) co_return f;
  evidence.set_reward_source(reward->source);
  SetReward(a, *reward);
  co_return std::nullopt;
}

}  // namespace

asio::awaitable<std::optional<Failure>> RunVerifier(Attempt& a) {
  a.control()->set_phase(RunPhase::kVerifier);
  const absl::Duration timeout = a.Timeout(a.task().timeouts().verifier(), a.options->timeouts.verifier);
  const absl::Time deadline = std::min(a.clock->Now() + timeout, a.EpisodeDeadline());
  const absl::Time started = a.clock->Now();
  if (auto f = co_await EndAgentPhase(a, deadline)) co_return f;
  v1::VerifierIsolation isolation = a.task().verifier().isolation();
  if (isolation == v1::VERIFIER_ISOLATION_UNSPECIFIED || isolation == v1::VERIFIER_ISOLATION_SEPARATE_UID) {
    auto fork = co_await ForkForVerifier(a, deadline);
    if (fork.ok()) {
      // Deleted as the attempt ends, beside the agent's sandbox (EpisodeDriver::Conclude): not on the reward's way.
      a.verifier_sandbox_id = *fork;
      const std::string agents = std::exchange(a.sandbox_id, *fork);
      auto failure = co_await Verify(a, v1::VERIFIER_ISOLATION_SEPARATE_UID, timeout, deadline, started);
      a.sandbox_id = agents;
      co_return failure;
    }
    // The default runs the verifier in the agent's sandbox instead wherever the fork fails: a host that cannot
    // fork or is full says so, and one whose forks fail (a container that denies the layers' user namespaces)
    // is worth one warning, not failed episodes. A stopped episode stops here; a task that asks for its own uid
    // fails as infra (retried elsewhere).
    if (isolation == v1::VERIFIER_ISOLATION_SEPARATE_UID || absl::IsCancelled(fork.status())) {
      co_return a.FromStatus(fork.status(), v1::EPISODE_PHASE_VERIFIER, v1::FAILURE_CLASS_INFRA,
                             "forking the sandbox for the verifier");
    }
    const bool expected = absl::IsFailedPrecondition(fork.status()) || absl::IsResourceExhausted(fork.status());
    static std::atomic<bool> warned{false};
    if (!expected && !warned.exchange(true)) {
      spdlog::warn(
          "forking a sandbox for its verifier failed on host {} ({}); verifiers there run in the agent's "
          "sandbox (CLEAN_ENV), as each result's verifier_evidence says",
          a.slot->client->address(), fork.status());
    }
    spdlog::debug("episode {}: the verifier runs in the agent's sandbox: {}", a.ticket.ids.episode_id(), fork.status());
    isolation = v1::VERIFIER_ISOLATION_CLEAN_ENV;
  }
  co_return co_await Verify(a, isolation, timeout, deadline, started);
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
