#include "services/scheduler/episode/episode_driver.h"

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "libs/harness/harnesses.h"
#include "libs/http/server.h"
#include "services/scheduler/episode/branching.h"
#include "services/scheduler/episode/env_runner.h"
#include "services/scheduler/episode/episode_calls.h"
#include "services/scheduler/episode/resident_process.h"
#include "services/scheduler/episode/runners.h"
#include "services/scheduler/episode/sandbox_request.h"
#include "services/scheduler/episode/trajectory_forms.h"
#include "services/scheduler/remote/warm_pool.h"
#include "services/scheduler/table/submission.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

// ---------------------------------------------------------------------------------------------- Attempt

absl::Duration Attempt::Timeout(const google::protobuf::Duration& task_timeout, absl::Duration fallback) const {
  const absl::Duration d = FromProto(task_timeout);
  return d > absl::ZeroDuration() ? d : fallback;
}

absl::Time Attempt::Deadline(const google::protobuf::Duration& task_timeout, absl::Duration fallback) const {
  return std::min(clock->Now() + Timeout(task_timeout, fallback), EpisodeDeadline());
}

absl::Duration Attempt::PausedSince(absl::Time from) const {
  return pauses == nullptr ? absl::ZeroDuration() : pauses->Between(from, clock->Now());
}

std::string Attempt::InSandbox(const std::string& path) const { return UnderHome(home, path); }

absl::Time Attempt::EpisodeDeadline() const {
  return batch_deadline_binds ? episode_deadline : episode_deadline + PausedSince(start);
}

void Attempt::StartAgentPhase() {
  agent_start = clock->Now();
  agent_timeout = Timeout(task().timeouts().agent(), options->timeouts.agent);
}

absl::Time Attempt::AgentDeadline() const {
  return std::min(agent_start + agent_timeout + PausedSince(agent_start), EpisodeDeadline());
}

Failure Attempt::FromStatus(const absl::Status& s, v1::EpisodePhase phase, v1::FailureClass failure_class,
                            const std::string& what) const {
  const bool episode_deadline_passed = clock->Now() >= EpisodeDeadline() - absl::Milliseconds(5);
  return FailureFromStatus(s, phase, failure_class, what, episode_deadline_passed, batch_deadline_binds);
}

// ---------------------------------------------------------------------------------------------- driver

namespace {

v1::InlineFile File(const std::string& path, std::string content) {
  v1::InlineFile f;
  f.set_path(path);
  f.set_content(std::move(content));
  return f;
}

const char* PhaseName(v1::EpisodePhase phase) {
  switch (phase) {
    case v1::EPISODE_PHASE_QUEUE: return "queue";
    case v1::EPISODE_PHASE_ACQUIRE: return "acquire";
    case v1::EPISODE_PHASE_SETUP: return "setup";
    case v1::EPISODE_PHASE_AGENT: return "agent";
    case v1::EPISODE_PHASE_TOOL: return "tool";
    case v1::EPISODE_PHASE_VERIFIER: return "verifier";
    case v1::EPISODE_PHASE_REWARD: return "reward";
    case v1::EPISODE_PHASE_EPISODE: return "episode";
    case v1::EPISODE_PHASE_DEADLINE: return "deadline";
    case v1::EPISODE_PHASE_ENVIRONMENT: return "environment";
    default: return "unspecified";
  }
}

}  // namespace

EpisodeDriver::EpisodeDriver(DriverParts parts, RunnerOptions options)
    : parts_(std::move(parts)),
      options_(std::move(options)),
      clock_(parts_.clock),
      table_(parts_.table),
      hosts_(parts_.hosts),
      placer_(parts_.hosts, parts_.pool, clock_) {}

const std::shared_ptr<ProxyApi>& EpisodeDriver::ProxyFor(const std::string& env_id) const {
  size_t best = 0;
  uint64_t best_score = 0;
  const auto& proxies = parts_.proxies;
  for (size_t i = 0; i < proxies.size(); ++i) {
    const uint64_t score = absl::HashOf(env_id, proxies[i]->address());
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return proxies[best];
}

void EpisodeDriver::Start(EpisodeTicket ticket) {
  ++parts_.occupancy->running;
  if (NeedsSandbox(*ticket.task)) ++parts_.occupancy->placing;
  // Each attempt on its own strand. With several io threads, the two branches of a `||` race (an LLM call against
  // a stop) would otherwise run on two threads at once, and asio's cancellation signals are not thread-safe: a
  // stop could be lost and the attempt wait out the call it was meant to abandon.
  async::Spawn(asio::make_strand(parts_.executor), Run(std::move(ticket), nullptr), "an episode's attempt");
}

std::vector<EpisodeTicket> EpisodeDriver::Branch(const EpisodeTicket& parent, size_t level) {
  return table_->Branch(parent, level);
}

void EpisodeDriver::StartChild(EpisodeTicket ticket, std::shared_ptr<const BranchStart> start) {
  ++parts_.occupancy->running;
  if (start->slot) {
    const std::string address = start->slot->client->address();
    hosts_->Hold(address);  // released by its cleanup, as a reserved slot is
    hosts_->Own(address, start->sandbox.sandbox_id());
  }
  async::Spawn(asio::make_strand(parts_.executor), Run(std::move(ticket), std::move(start)), "a branch's attempt");
}

asio::awaitable<void> EpisodeDriver::Run(EpisodeTicket ticket, std::shared_ptr<const BranchStart> resume) {
  Attempt a{std::move(ticket)};
  a.branching.resume = std::move(resume);
  a.branching.children = this;
  // Counted in placing from Start until a sandbox slot is reserved or the attempt gives up on one (a branch has
  // its fork already).
  bool placing = NeedsSandbox(a.task()) && a.branching.resume == nullptr;
  a.on_reserved = [this, &placing] {
    if (placing) --parts_.occupancy->placing;
    placing = false;
  };
  a.options = &options_;
  a.limiter = parts_.limiter;
  a.pauses = parts_.pauses;
  a.envs = parts_.envs;
  a.clock = clock_;
  a.start = clock_->Now();
  const absl::Duration episode_timeout = a.Timeout(a.task().timeouts().episode(), options_.timeouts.episode);
  a.episode_deadline = a.start + episode_timeout;
  if (a.ticket.batch_deadline && *a.ticket.batch_deadline < a.episode_deadline) {
    a.episode_deadline = *a.ticket.batch_deadline;
    a.batch_deadline_binds = true;
  }
  if (a.branching.resume) {  // a branch's time runs on from its parent's
    a.episode_deadline = std::min(a.episode_deadline, a.branching.resume->episode_deadline);
    a.batch_deadline_binds = a.batch_deadline_binds && a.episode_deadline == *a.ticket.batch_deadline;
  }
  if (const auto& plan = a.ticket.branch_plan) {
    const uint32_t index = a.ticket.ids.index_in_group();
    a.branching.info = a.branching.resume
                           ? a.branching.resume->info
                           : BranchInfoOf(*plan, a.ticket.ids.batch_id(), a.ticket.ids.group_index(), index);
    a.branching.next_level = plan->FirstOwnLevel(index);
  }
  *a.result.mutable_ids() = a.ticket.ids;
  a.result.set_env_id(a.ticket.env_id);
  ToProto(a.start, a.result.mutable_timings()->mutable_start_time());
  ToProto(std::max(absl::ZeroDuration(), a.start - a.ticket.queued_since), a.result.mutable_timings()->mutable_queue());

  // A throw (a bug of ours, an answer of a shape nobody expected) ends the attempt as an infrastructure failure
  // that is retried, with its sandbox and session cleaned up and its concurrency slot given back, never silently.
  std::optional<Failure> failure;
  try {
    failure = co_await RunPhases(a);
  } catch (const std::exception& e) {
    spdlog::error("episode {}: the attempt threw: {}", a.ticket.env_id, e.what());
    failure = Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_EPISODE,
                      absl::StrCat("internal error in the scheduler: ", e.what())};
  }
  a.on_reserved();
  co_await Conclude(a, std::move(failure));
  parts_.occupancy->Ended();
  if (parts_.on_finished) parts_.on_finished();
}

asio::awaitable<std::optional<Failure>> EpisodeDriver::RunPhases(Attempt& a) {
  if (a.branching.resume && a.branching.resume->failure) {
    // Its sandbox was never made: it ends with why, and the fork's slot was never held.
    co_return a.branching.resume->failure;
  }
  if (a.branching.resume) AdoptFork(a);  // first: whatever happens next, the fork is deleted with the attempt
  std::optional<Failure> failure = co_await OpenSession(a);
  if (!failure && a.branching.resume) {
    failure = co_await SetUpFork(a);
  } else if (!failure && NeedsSandbox(a.task())) {
    failure = co_await AcquireSandbox(a);
  }
  if (failure || a.control()->stopped()) co_return failure;
  a.control()->set_phase(RunPhase::kAgent);
  a.StartAgentPhase();
  if (a.branching.resume) a.agent_start = std::min(a.agent_start, a.branching.resume->agent_start);
  switch (a.task().runner()) {
    case v1::RUNNER_SINGLE_TURN: co_return co_await RunSingleTurn(a);
    case v1::RUNNER_TOOL_LOOP: co_return co_await RunToolLoop(a);
    case v1::RUNNER_AGENT: co_return co_await RunAgent(a);
    case v1::RUNNER_ENVIRONMENT: co_return co_await RunEnvironment(a);
    default:
      co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_AGENT, v1::EPISODE_PHASE_AGENT, "unknown runner"};
  }
}

asio::awaitable<std::optional<Failure>> EpisodeDriver::OpenSession(Attempt& a) {
  const v1::Task& task = a.task();
  a.proxy = ProxyFor(a.ticket.env_id);
  v1::OpenSessionRequest request;
  request.set_env_id(a.ticket.env_id);
  *request.mutable_policy() = task.llm().session_policy();
  v1::SessionPolicy& policy = *request.mutable_policy();
  if (options_.capture_token_ids) {
    policy.set_capture_token_ids(true);
    policy.set_capture_logprobs(true);
  }
  // The scheduler's own runners send the task's llm.params_json: the trainer's sampling, kept, not an agent's.
  if (task.runner() != v1::RUNNER_AGENT && !policy.has_neutralize_sampling()) policy.set_neutralize_sampling(false);
  // A harness's side calls and compaction get their roles from its entry's rules, after the task's own.
  if (task.runner() == v1::RUNNER_AGENT && !task.agent().harness().empty()) {
    if (auto harness = ResolveHarness(task.agent().harness()); harness.ok()) AddRoleRules(*harness->harness, policy);
  }
  if (task.llm().seed_sampling()) {
    policy.mutable_sampling_overrides()->set_seed(static_cast<int64_t>(a.ticket.ids.seed() & 0x7fffffffffffffffULL));
  }
  if (!policy.has_ttl()) ToProto(a.EpisodeDeadline() - clock_->Now() + absl::Minutes(5), policy.mutable_ttl());
  *request.mutable_episode() = a.ticket.ids;
  // The proxy checks it against what its upstreams serve (a task's fault, before any sandbox is made) and
  // chooses one when neither the task nor the scheduler names any.
  request.set_model(!task.llm().model().empty() ? task.llm().model() : options_.default_model);
  (*request.mutable_labels())[kSchedulerLabel] = options_.scheduler_id;
  (*request.mutable_labels())["corral.batch"] = a.ticket.ids.batch_id();
  const absl::Time deadline = std::min(clock_->Now() + absl::Seconds(30), a.EpisodeDeadline());
  a.session_requested = true;
  // A proxy restarting is waited for (jittered backoff, within the deadline): it costs the episode only time.
  absl::StatusOr<v1::OpenSessionResponse> session;
  for (uint32_t attempt = 2;; ++attempt) {
    v1::OpenSessionRequest copy = request;
    session = co_await a.proxy->Open(std::move(copy), a.Call(deadline));
    const absl::Duration pause = RetryDelay(kCallRetry, attempt, a.ticket.ids.seed());
    if (session.ok() || session.status().code() != absl::StatusCode::kUnavailable || a.control()->stopped() ||
        clock_->Now() + pause >= deadline) {
      break;
    }
    co_await async::SleepFor(*clock_, pause);
  }
  if (!session.ok()) {
    co_return a.FromStatus(session.status(), v1::EPISODE_PHASE_ACQUIRE,
                           FaultOf(Step::kOpenSession, session.status().code()),
                           absl::StrCat("opening a session on proxy ", a.proxy->address()));
  }
  a.session = *std::move(session);
  a.model = a.session.model();
  auto base = ParseBaseUrl(a.session.base_url());
  if (!base.ok()) {
    co_return Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_ACQUIRE,
                      absl::StrCat("proxy ", a.proxy->address(), ": ", base.status().message())};
  }
  a.base = *std::move(base);
  co_return std::nullopt;
}

asio::awaitable<std::optional<Failure>> EpisodeDriver::AcquireSandbox(Attempt& a) {
  const v1::Task& task = a.task();
  const v1::EnvironmentSpec& env = task.environment();
  const absl::Time acquire_started = clock_->Now();
  const absl::Time acquire_deadline = a.Deadline(task.timeouts().acquire(), options_.timeouts.acquire);
  const absl::Duration setup_timeout = a.Timeout(task.timeouts().setup(), options_.timeouts.setup);

  SandboxRequest request = SandboxRequestFor(task, a.ticket.ids, a.base.port, options_.scheduler_id);
  a.workdir = request.workdir;

  // (Built apart from the co_await: GCC 12 mishandles a temporary with a destructor in a co_await's arguments.)
  PlaceRequest place{std::move(request),  env,         acquire_deadline, setup_timeout,
                     a.EpisodeDeadline(), a.control(), a.on_reserved};
  std::variant<Placement, PlaceFailure> placed = co_await placer_.Place(std::move(place));
  if (auto* failed = std::get_if<PlaceFailure>(&placed)) {
    if (failed->stopped) co_return StoppedFailure(a, failed->phase, "acquire");
    co_return a.FromStatus(failed->status, failed->phase, failed->failure_class, failed->what);
  }
  Placement& placement = std::get<Placement>(placed);
  const absl::Duration setup_time = placement.setup_time;
  const std::string address = placement.slot.client->address();
  a.slot = std::move(placement.slot);
  a.sandbox_id = placement.created.sandbox().sandbox_id();
  a.home = placement.created.sandbox().home();
  a.result.set_host_address(address);
  a.result.set_host_id(a.slot->host_id);
  a.result.set_sandbox_id(a.sandbox_id);
  a.result.set_warm_sandbox(placement.warm);
  *a.result.mutable_protections() = placement.created.sandbox().protections();
  table_->Placed(a.ticket.ids, address, a.sandbox_id, a.ticket.env_id);
  ToProto(clock_->Now() - acquire_started - setup_time, a.result.mutable_timings()->mutable_sandbox_acquire());

  // Setup: the task's files, the instruction (agent) and .corral/task.json without what would give the answer away
  // (the verifier phase writes it whole).
  a.control()->set_phase(RunPhase::kSetup);
  const absl::Time upload_started = clock_->Now();
  std::vector<v1::InlineFile> files(env.files().begin(), env.files().end());
  files.push_back(File(kTaskJsonPath, TaskJson(task, a.ticket.ids, /*for_verifier=*/false)));
  if (task.runner() == v1::RUNNER_AGENT) {
    files.push_back(File(InstructionPath(task), task.prompt()));
  }
  const absl::Time deadline = a.Deadline(task.timeouts().setup(), options_.timeouts.setup);
  if (auto f = co_await Upload(a, files, deadline, v1::EPISODE_PHASE_SETUP)) co_return f;
  ToProto(setup_time + (clock_->Now() - upload_started), a.result.mutable_timings()->mutable_setup());
  co_return std::nullopt;
}

void EpisodeDriver::AdoptFork(Attempt& a) {
  const BranchStart& start = *a.branching.resume;
  a.slot = start.slot;
  a.sandbox_id = start.sandbox.sandbox_id();
  a.home = start.sandbox.home();
  a.workdir = start.workdir;
  const std::string address = a.slot->client->address();
  a.result.set_host_address(address);
  a.result.set_host_id(a.slot->host_id);
  a.result.set_sandbox_id(a.sandbox_id);
  *a.result.mutable_protections() = start.sandbox.protections();
  a.result.set_llm_calls(start.llm_calls);
  a.result.set_tool_calls(start.tool_calls);
  table_->Placed(a.ticket.ids, address, a.sandbox_id, a.ticket.env_id);
}

asio::awaitable<std::optional<Failure>> EpisodeDriver::SetUpFork(Attempt& a) {
  a.control()->set_phase(RunPhase::kSetup);
  // The parent's .corral/task.json names the parent: the child's names itself (its id and seed).
  std::vector<v1::InlineFile> files = {File(kTaskJsonPath, TaskJson(a.task(), a.ticket.ids, /*for_verifier=*/false))};
  const absl::Time deadline = a.Deadline(a.task().timeouts().setup(), options_.timeouts.setup);
  if (auto f = co_await Upload(a, files, deadline, v1::EPISODE_PHASE_SETUP)) co_return f;
  // The parent's processes the fork carried here (its python session, variables and all) serve this child's
  // calls from now on; one that cannot be taken up starts afresh at its next call, as without a carry.
  for (const BranchStart::Carried& c : a.branching.resume->carried) {
    v1::AttachProcess attach;
    attach.set_sandbox_id(a.sandbox_id);
    attach.set_process_id(c.process_id);
    auto process = co_await a.slot->client->Attach(std::move(attach));
    if (process.ok()) {
      a.residents.Put(c.key, ResidentProcesses::Entry{*std::move(process), c.marker});
    } else {
      spdlog::warn("episode {}: taking up the carried {} ({}): {}", a.ticket.ids.episode_id(), c.key, c.process_id,
                   std::string(process.status().message()));
    }
  }
  co_return std::nullopt;
}

asio::awaitable<void> EpisodeDriver::Conclude(Attempt& a, std::optional<Failure> failure) {
  a.control()->set_phase(RunPhase::kReward);
  v1::EpisodeResult& r = a.result;
  failure = ApplyStop(a.control()->reason(), a.control()->message(), std::move(failure));
  if (a.session_requested) {
    // Closed even when the open failed on our side: a stop may have cancelled the call after the proxy opened it.
    auto closed = co_await a.proxy->Close(a.ticket.env_id, v1::TRAJECTORY_FORMAT_CALLS, absl::Seconds(30));
    const bool never_opened = a.session.env_token().empty() && closed.status().code() == absl::StatusCode::kNotFound;
    if (closed.ok()) {
      *r.mutable_trajectory() =
          a.branching.resume ? JoinCalls(a.branching.resume->prefix, closed->trajectory()) : closed->trajectory();
      if (r.trajectory().has_first_policy_version()) r.set_first_policy_version(r.trajectory().first_policy_version());
      if (r.trajectory().has_last_policy_version()) r.set_last_policy_version(r.trajectory().last_policy_version());
    } else if (closed.status().code() != absl::StatusCode::kNotFound) {
      // The proxy is away (restarting: its journal brings the session back open). Close it once it answers.
      auto executor = co_await asio::this_coro::executor;
      async::Spawn(executor, CloseLater(a.proxy, a.ticket.env_id), "closing a session later");
    }
    if (!closed.ok() && !never_opened && !failure) {
      failure = Failure{v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, v1::EPISODE_PHASE_REWARD,
                        absl::StrCat("could not take the trajectory from proxy ", a.proxy->address(), ": ",
                                     closed.status().message())};
    }
  }
  SetOutcome(failure, a.task().runner(), r);
  SetBranchInfo(a, r);
  a.residents.StopAll();
  co_await EndSandboxes(a);
  MeasureUsage(a);
  if ((a.task().runner() == v1::RUNNER_TOOL_LOOP || a.task().has_env_server()) && r.agent_output_tail().empty()) {
    r.set_agent_output_tail(a.output.Last(1024));
  }
  const absl::Time end = clock_->Now();
  ToProto(a.tools_time, r.mutable_timings()->mutable_tools());
  ToProto(end - a.start, r.mutable_timings()->mutable_total());
  ToProto(end, r.mutable_timings()->mutable_end_time());
  if (a.task().runner() != v1::RUNNER_AGENT && !r.timings().has_agent()) {
    ToProto(end - a.start - FromProto(r.timings().sandbox_acquire()) - FromProto(r.timings().setup()) -
                FromProto(r.timings().verifier()),
            r.mutable_timings()->mutable_agent());
  }
  if (failure && failure->status != v1::EPISODE_STATUS_CANCELLED) {
    spdlog::info("episode {} attempt {}: {} in {} ({})", a.ticket.ids.episode_id(), a.ticket.ids.attempt(),
                 v1::EpisodeStatus_Name(r.status()), PhaseName(failure->phase), failure->message);
  }
  if (parts_.metrics != nullptr) parts_.metrics->EpisodeEnded(a.task().runner(), r, a.ticket.tenant);
  const std::string env_id = a.ticket.env_id;
  const FinishOutcome outcome = table_->Finish(a.ticket, std::move(r));
  if (parts_.metrics != nullptr && outcome == FinishOutcome::kRetried) parts_.metrics->Retried();
  if (a.session_requested) (void)co_await a.proxy->Ack(env_id, absl::Seconds(10));
}

asio::awaitable<void> EpisodeDriver::CloseLater(std::shared_ptr<ProxyApi> proxy, std::string env_id) {
  for (int attempt = 0; attempt < 120; ++attempt) {
    co_await async::SleepFor(*clock_, absl::Seconds(1));
    auto closed = co_await proxy->Close(env_id, v1::TRAJECTORY_FORMAT_CALLS, absl::Seconds(10));
    if (closed.ok() || closed.status().code() == absl::StatusCode::kNotFound) {
      (void)co_await proxy->Ack(env_id, absl::Seconds(10));
      co_return;
    }
  }
  spdlog::warn("proxy {}: session {} could not be closed; its TTL will end it", proxy->address(), env_id);
}

}  // namespace corral::scheduler
