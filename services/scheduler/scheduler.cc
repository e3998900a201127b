#include "services/scheduler/scheduler.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"
#include "libs/async/spawn.h"
#include "libs/core/logging.h"
#include "libs/harness/harnesses.h"
#include "libs/http/server.h"
#include "services/scheduler/table/branch_plan.h"
#include "services/scheduler/table/open_environment.h"
#include "services/scheduler/table/submission.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

Scheduler::Scheduler(asio::io_context& io, Clock* clock, SchedulerOptions options, EpisodeTable* table,
                     HostRegistry* hosts, EpisodeDriver* driver, Doorbell* doorbell, SchedulerMetrics* metrics,
                     WarmPool* pool, EnvBoard* envs)
    : io_(io),
      clock_(clock),
      options_(options),
      table_(table),
      hosts_(hosts),
      driver_(driver),
      metrics_(metrics),
      pool_(pool),
      envs_(envs),
      doorbell_(doorbell) {}

int64_t WarmRoom(const HostRegistry& hosts, const Occupancy& occupancy, const EpisodeTable& table) {
  return hosts.FreeSlots() - occupancy.placing.load() - static_cast<int64_t>(table.QueuedNeedingSandbox());
}

void StopRunsOnLostHost(EpisodeTable& table, const std::string& address) {
  auto runs = table.Running(address);
  if (!runs.empty()) spdlog::warn("host {} lost: retrying its {} episode(s) elsewhere", address, runs.size());
  for (auto& r : runs) r->Stop(StopReason::kHostLost, absl::StrCat("sandbox host ", address, " stopped answering"));
}

void Scheduler::Start() {
  async::Spawn(io_, Dispatch(), "the dispatcher");
  async::Spawn(io_, Tick(), "the scheduler's tick");
  async::Spawn(io_, hosts_->Run(&stopping_), "the host registry");
  if (pool_ != nullptr) async::Spawn(io_, pool_->Run(&stopping_), "the warm pool");
}

void Scheduler::Stop() {
  asio::post(io_, [this] {
    stopping_ = true;
    doorbell_->Ring();
  });
}

asio::awaitable<void> Scheduler::Dispatch() {
  while (!stopping_) {
    doorbell_->Clear();
    // A pass that throws is logged; the next ring tries again (one bad ticket must not stop all dispatching).
    if (!draining_) async::SurvivePass("a dispatch pass", [this] { DispatchPass(); });
    co_await doorbell_->Wait(absl::Milliseconds(500));
  }
}

void Scheduler::DispatchPass() {
  // Sandbox slots free now, minus those the attempts already started but not yet placed count on.
  // Warm sandboxes hold slots but each can serve an episode.
  int64_t budget = hosts_->FreeSlots() - driver_->placing() + (pool_ != nullptr ? pool_->ready() : 0);
  while (driver_->running() < options_.max_concurrent_episodes) {
    auto ticket = table_->StartNext([&](const v1::Task& task) { return budget > 0 || !NeedsSandbox(task); });
    if (!ticket) break;
    if (NeedsSandbox(*ticket->task)) --budget;
    driver_->Start(*std::move(ticket));
  }
}

asio::awaitable<void> Scheduler::Tick() {
  while (!stopping_) {
    async::SurvivePass("the scheduler's tick", [this] { TickPass(); });
    doorbell_->Ring();
    co_await async::SleepFor(*clock_, absl::Seconds(1));
  }
}

void Scheduler::TickPass() {
  table_->ExpireDeadlines();
  table_->Poke();
  if (metrics_ == nullptr) return;
  const v1::Batch all = table_->Progress("", nullptr);
  metrics_->SetQueue(all.counts().queued(), all.counts().running(), static_cast<double>(table_->AwaitingAck()));
  std::map<v1::HostState, int> by_state;
  for (const v1::Host& h : hosts_->List([](const std::string&) { return 0u; })) ++by_state[h.state()];
  metrics_->SetHosts(by_state);
  std::array<int, std::size(kRunPhases)> by_phase{};
  for (const auto& run : table_->Running("")) {
    if (run) ++by_phase[static_cast<size_t>(run->phase())];
  }
  metrics_->SetRunningPhases(by_phase);
  if (pool_ != nullptr) metrics_->SetWarmPool(pool_->ready(), pool_->hits(), pool_->misses());
}

void Scheduler::Submit(v1::BatchSpec spec, std::vector<v1::Task> tasks,
                       std::function<void(absl::StatusOr<v1::Batch>)> done) {
  SubmitBatch(std::move(spec), std::move(tasks), /*trainer_driven=*/false, std::move(done));
}

std::string Scheduler::OpenEnvironment(const v1::OpenEnvironmentRequest& request, EnvBoard::OpenDone opened) {
  if (envs_ == nullptr) {
    opened(absl::UnimplementedError("this scheduler does not open trainer-driven environments"));
    return "";
  }
  auto batch = TrainerDrivenBatchOf(request);
  if (!batch.ok()) {
    opened(batch.status());
    return "";
  }
  // The id is chosen here: the trainer's wait is on the board before the episode can start.
  if (batch->spec.batch_id().empty()) {
    batch->spec.set_batch_id(absl::StrCat("env-", absl::ToUnixMillis(clock_->Now()), "-", next_batch_++));
  }
  const std::string episode_id = EpisodeId(batch->spec.batch_id(), 0, 0);
  auto once = std::make_shared<EnvBoard::OpenDone>(std::move(opened));
  auto forward = [once](absl::StatusOr<v1::OpenEnvironmentResponse> out) { (*once)(std::move(out)); };
  if (absl::Status s = envs_->Expect(episode_id, batch->idle_timeout, forward); !s.ok()) {
    (*once)(s);
    return "";
  }
  std::vector<v1::Task> tasks = {std::move(batch->task)};
  SubmitBatch(std::move(batch->spec), std::move(tasks), /*trainer_driven=*/true,
              [this, episode_id, once](absl::StatusOr<v1::Batch> submitted) {
                absl::Status s = submitted.status();
                if (s.ok() && submitted->counts().queued() + submitted->counts().running() == 0) {
                  s = absl::FailedPreconditionError(
                      absl::StrCat("batch '", submitted->spec().batch_id(),
                                   "' exists and its episode has ended: open with another batch_id"));
                }
                // Refused: the trainer hears it here, unless the episode already answered (it ended first).
                if (!s.ok() && envs_->Forget(episode_id)) (*once)(s);
              });
  return episode_id;
}

void Scheduler::SubmitBatch(v1::BatchSpec spec, std::vector<v1::Task> tasks, bool trainer_driven,
                            std::function<void(absl::StatusOr<v1::Batch>)> done) {
  if (draining_) {
    done(absl::FailedPreconditionError("the scheduler is draining: Submit is refused until Drain(resume)"));
    return;
  }
  if (absl::Status s = ValidateSpec(spec, clock_->Now(), options_.limits); !s.ok()) return done(s);
  if (tasks.empty() && spec.groups_in_flight() == 0) return done(absl::InvalidArgumentError("the batch has no tasks"));
  if (static_cast<int64_t>(tasks.size()) > options_.limits.max_batch_tasks) {
    return done(absl::ResourceExhaustedError(absl::StrCat("the batch has ", tasks.size(), " tasks; at most ",
                                                          options_.limits.max_batch_tasks, " (max_batch_tasks)")));
  }
  if (spec.target_groups() > tasks.size()) {
    return done(absl::InvalidArgumentError(absl::StrCat("spec.target_groups is ", spec.target_groups(),
                                                        " but the batch has only ", tasks.size(), " tasks (groups)")));
  }
  const std::string digest = BatchDigest(spec, tasks);
  auto effective = Effective(tasks, spec, trainer_driven);
  if (!effective.ok()) return done(effective.status());
  std::random_device rd;
  const uint64_t random_seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  if (spec.batch_id().empty()) {
    spec.set_batch_id(absl::StrCat("b-", absl::ToUnixMillis(clock_->Now()), "-", next_batch_++));
  }
  v1::BatchSpec full = WithDefaults(std::move(spec), options_.limits, random_seed);
  table_->Submit(std::move(full), digest, *std::move(effective),
                 [this, done = std::move(done)](absl::StatusOr<v1::Batch> batch) {
                   if (batch.ok()) doorbell_->Ring();
                   done(std::move(batch));
                 });
}

absl::StatusOr<std::vector<std::shared_ptr<const v1::Task>>> Scheduler::Effective(const std::vector<v1::Task>& tasks,
                                                                                  const v1::BatchSpec& spec,
                                                                                  bool trainer_driven) const {
  std::vector<std::shared_ptr<const v1::Task>> effective;
  effective.reserve(tasks.size());
  std::set<std::string> ids;
  for (const v1::Task& task : tasks) {
    if (!ids.insert(task.id()).second) {
      return absl::InvalidArgumentError(absl::StrCat("task '", task.id(), "': id is used twice in the batch"));
    }
    auto t = EffectiveTask(task, spec.overrides(), options_.limits.default_runner);
    if (!t.ok()) return t.status();
    if (absl::Status s = CheckBranching(*t, spec.group_size(), spec.redundancy()); !s.ok()) return s;
    if (t->env_server().trainer_driven() && !trainer_driven) {
      return absl::InvalidArgumentError(
          absl::StrCat("task '", task.id(),
                       "': env_server.trainer_driven is for OpenEnvironment (the trainer sends the actions); "
                       "a submitted environment task is driven by the scheduler"));
    }
    if (absl::Status s = CheckHarnessInstalled(*t); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("task '", task.id(), "': ", s.message()));
    }
    effective.push_back(std::make_shared<const v1::Task>(*std::move(t)));
  }
  return effective;
}

absl::Status Scheduler::CheckHarnessInstalled(const v1::Task& task) const {
  // In an image the harness comes from the image's PATH, which no host reports.
  if (task.runner() != v1::RUNNER_AGENT || task.agent().harness().empty() || !task.environment().image().empty()) {
    return absl::OkStatus();
  }
  auto harness = ResolveHarness(task.agent().harness());
  if (!harness.ok()) return harness.status();  // (EffectiveTask refused it already)
  return hosts_->CheckHarness(harness->id(), harness->install());
}

void Scheduler::AppendTasks(const v1::AppendTasksRequest& request,
                            std::function<void(absl::StatusOr<v1::Batch>)> done) {
  if (request.batch_id().empty()) return done(absl::InvalidArgumentError("batch_id is required"));
  if (request.tasks().empty() && !request.close_input()) {
    return done(absl::InvalidArgumentError("nothing to do: no tasks and not close_input"));
  }
  auto batch = table_->GetBatch(request.batch_id());
  if (!batch.ok()) return done(batch.status());
  const std::vector<v1::Task> tasks(request.tasks().begin(), request.tasks().end());
  auto effective = Effective(tasks, batch->spec());
  if (!effective.ok()) return done(effective.status());
  table_->Append(request.batch_id(), *std::move(effective), request.close_input(),
                 [this, done = std::move(done)](absl::StatusOr<v1::Batch> out) {
                   if (out.ok()) doorbell_->Ring();
                   done(std::move(out));
                 });
}

void Scheduler::Drain(const v1::DrainRequest& request, std::function<void(absl::StatusOr<v1::DrainResponse>)> done) {
  const absl::Duration grace = request.has_grace() ? FromProto(request.grace()) : options_.drain_grace;
  if (grace < absl::ZeroDuration()) return done(absl::InvalidArgumentError("grace must not be negative"));
  std::string address;
  if (!request.host().empty()) {
    auto a = hosts_->SetDraining(request.host(), !request.resume());
    if (!a.ok()) return done(a.status());
    address = *a;
  } else {
    draining_ = !request.resume();
  }
  if (request.resume()) {
    spdlog::info("drain of {} undone", address.empty() ? "the scheduler" : address);
    doorbell_->Ring();
    v1::DrainResponse out;
    out.set_queued(static_cast<uint32_t>(table_->QueuedCount()));
    return done(out);
  }
  spdlog::info("draining {} (grace {})", address.empty() ? "the scheduler" : address, absl::FormatDuration(grace));
  async::Spawn(io_, RunDrain(address, grace, std::move(done)), "a drain");
}

asio::awaitable<void> Scheduler::RunDrain(std::string address, absl::Duration grace,
                                          std::function<void(absl::StatusOr<v1::DrainResponse>)> done) {
  const size_t at_start = table_->RunningCount(address);
  const absl::Time until = clock_->Now() + grace;
  while (table_->RunningCount(address) > 0 && clock_->Now() < until) {
    co_await async::SleepFor(*clock_, absl::Milliseconds(20));
  }
  uint32_t requeued = 0;
  for (auto& run : table_->Running(address)) {
    if (run->Stop(StopReason::kRequeue, "drained")) ++requeued;
  }
  // Done when nothing runs there and the stopped episodes' sandboxes are deleted (the host is empty of ours).
  while (table_->RunningCount(address) > 0 || hosts_->InUse(address) > 0) {
    co_await async::SleepFor(*clock_, absl::Milliseconds(20));
  }
  v1::DrainResponse out;
  out.set_requeued(requeued);
  out.set_finished(static_cast<uint32_t>(at_start > requeued ? at_start - requeued : 0));
  out.set_queued(static_cast<uint32_t>(table_->QueuedCount()));
  spdlog::info("drained {}: {} finished, {} re-queued, {} queued", address.empty() ? "the scheduler" : address,
               out.finished(), out.requeued(), out.queued());
  done(out);
}

}  // namespace corral::scheduler
