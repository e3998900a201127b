#include "services/scheduler/table/episode_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "libs/api/pagination.h"
#include "libs/api/proto_time.h"

namespace corral::scheduler {

EpisodeTable::EpisodeTable(Clock* clock, EpisodeLog* log, SubmitLimits limits, int64_t max_pending,
                           RetryBackoff retry_backoff, TableHooks hooks)
    : clock_(clock),
      log_(log),
      limits_(limits),
      max_pending_(max_pending),
      retry_backoff_(retry_backoff),
      hooks_(std::move(hooks)) {}

EpisodeTable::Batch* EpisodeTable::FindBatch(const std::string& id) {
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : &it->second;
}
const EpisodeTable::Batch* EpisodeTable::FindBatch(const std::string& id) const {
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : &it->second;
}

void EpisodeTable::Changed() const {
  if (hooks_.on_change && !restoring_) hooks_.on_change();
}

void EpisodeTable::Touch(Batch& b) {
  ++b.version;
  ++version_;
}

v1::EpisodeIds EpisodeTable::Ids(const Batch& b, uint32_t g, uint32_t i) const {
  v1::EpisodeIds ids;
  ids.set_batch_id(b.spec.batch_id());
  ids.set_group_id(GroupId(b.spec.batch_id(), g));
  ids.set_episode_id(EpisodeId(b.spec.batch_id(), g, i));
  ids.set_task_id(b.tasks[g]->id());
  ids.set_group_index(g);
  ids.set_index_in_group(i);
  ids.set_seed(EpisodeSeed(b.spec.seed(), g, i));
  ids.set_attempt(b.at(g, i).attempt);
  return ids;
}

void EpisodeTable::Enqueue(Batch& b, uint32_t g, uint32_t i) {
  queue_[QueueKey{-static_cast<int64_t>(b.spec.priority()), b.order, g, i}] = b.spec.batch_id();
  b.at(g, i).state = State::kQueued;
  ++b.queued;
  if (NeedsSandbox(*b.tasks[g])) ++queued_sandbox_;
}

void EpisodeTable::Dequeue(Batch& b, uint32_t g, uint32_t i) {
  if (Episode& e = b.at(g, i); e.parked) {  // never in the queue
    e.parked = false;
    --b.queued;
    return;
  }
  queue_.erase(QueueKey{-static_cast<int64_t>(b.spec.priority()), b.order, g, i});
  --b.queued;
  if (NeedsSandbox(*b.tasks[g])) --queued_sandbox_;
}

// ---------------------------------------------------------------------------------------------- batches

namespace {

// Episodes reserved against max_pending_episodes while a batch is journaled: every task's group, or what a
// dynamic batch opens at first (its target; more groups open as they are needed).
int64_t Reserved(const v1::BatchSpec& spec, size_t tasks) {
  // What opens at once: every task, the target's worth (dynamic sampling), or the groups in flight (a stream).
  int64_t groups = static_cast<int64_t>(tasks);
  if (spec.target_groups() > 0) groups = std::min<int64_t>(spec.target_groups(), groups);
  if (spec.groups_in_flight() > 0) groups = std::min<int64_t>(spec.groups_in_flight(), groups);
  return groups * (spec.group_size() + spec.redundancy());
}

}  // namespace

void EpisodeTable::Submit(v1::BatchSpec spec, const std::string& digest,
                          std::vector<std::shared_ptr<const v1::Task>> tasks,
                          std::function<void(absl::StatusOr<v1::Batch>)> done) {
  const std::string id = spec.batch_id();
  absl::StatusOr<v1::Batch> early = absl::UnknownError("");
  {
    absl::MutexLock lock(&mu_);
    if (!spec.has_base_policy_version()) spec.set_base_policy_version(policy_version_);
    const int64_t episodes = Reserved(spec, tasks.size());
    if (const Batch* existing = FindBatch(id)) {
      early = existing->digest == digest
                  ? absl::StatusOr<v1::Batch>(Describe(*existing))
                  : absl::AlreadyExistsError(absl::StrCat("batch '", id, "' exists with different content"));
    } else if (submitting_.count(id)) {
      early = absl::UnavailableError(absl::StrCat("batch '", id, "' is being submitted by another call; retry"));
    } else if (pending_ + episodes > max_pending_) {
      early = absl::ResourceExhaustedError(absl::StrCat("the batch's ", episodes,
                                                        " episodes would exceed max_pending_episodes (", max_pending_,
                                                        "; ", pending_, " pending now)"));
    } else {
      submitting_.insert(id);
      pending_ += episodes;  // reserved while the journal writes
    }
  }
  if (early.status().code() != absl::StatusCode::kUnknown) {
    done(std::move(early));
    return;
  }
  const absl::Time now = clock_->Now();
  auto shared_tasks = std::make_shared<std::vector<std::shared_ptr<const v1::Task>>>(std::move(tasks));
  log_->AddBatch(
      spec, digest, now, *shared_tasks,
      [this, spec, digest, now, shared_tasks, done = std::move(done)](absl::Status s) {
        v1::Batch out;
        {
          absl::MutexLock lock(&mu_);
          submitting_.erase(spec.batch_id());
          pending_ -= Reserved(spec, shared_tasks->size());
          if (s.ok()) {
            Batch& b = batches_[spec.batch_id()];
            b.order = next_order_++;
            b.spec = spec;
            b.digest = digest;
            b.create_time = now;
            b.tasks = std::move(*shared_tasks);
            b.per_group = spec.group_size() + spec.redundancy();
            b.episodes.resize(b.tasks.size() * b.per_group);
            b.groups.resize(b.tasks.size());
            if (b.incremental()) {
              OpenMore(b);
            } else {
              for (uint32_t g = 0; g < b.tasks.size(); ++g) Open(b, g);
            }
            Touch(b);
            out = Describe(b);
          }
        }
        if (!s.ok()) {
          done(absl::UnavailableError(absl::StrCat("the journal could not record the batch: ", s.message())));
          return;
        }
        Changed();
        done(std::move(out));
      });
}

// ---------------------------------------------------------------------------------------------- running

bool EpisodeTable::HasQueued() const {
  absl::MutexLock lock(&mu_);
  return !queue_.empty();
}

size_t EpisodeTable::QueuedNeedingSandbox() const {
  absl::MutexLock lock(&mu_);
  return queued_sandbox_;
}

size_t EpisodeTable::QueuedCount() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

std::optional<EpisodeTicket> EpisodeTable::StartNext(const std::function<bool(const v1::Task&)>& eligible) {
  EpisodeTicket ticket;
  uint32_t runs = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = queue_.begin();
    Batch* b = nullptr;
    const absl::Time now = clock_->Now();
    for (; it != queue_.end(); ++it) {
      b = FindBatch(it->second);
      const Episode& e = b->at(it->first.group, it->first.index);
      if (e.not_before <= now && Admitted(*b, it->first.group) && eligible(*b->tasks[it->first.group])) break;
    }
    if (it == queue_.end()) return std::nullopt;
    const uint32_t g = it->first.group, i = it->first.index;
    Dequeue(*b, g, i);
    Episode& e = b->at(g, i);
    e.state = State::kRunning;
    e.control = std::make_shared<RunControl>();
    runs = ++e.runs;
    ++b->running;
    b->StartGroup(g);
    if (b->start_time == absl::InfinitePast()) b->start_time = clock_->Now();
    Touch(*b);
    ticket.ids = Ids(*b, g, i);
    ticket.task = b->tasks[g];
    ticket.control = e.control;
    ticket.env_id = EnvId(ticket.ids.episode_id(), runs);
    ticket.queued_since = b->create_time;
    if (b->spec.has_deadline()) ticket.batch_deadline = FromProto(b->spec.deadline());
    ticket.max_attempts = b->spec.max_attempts();
    ticket.tenant = b->spec.tenant();
    ticket.branch_plan = PlanOf(*ticket.task, b->spec.group_size());
  }
  log_->RunStarted(ticket.ids.episode_id(), ticket.ids.attempt(), runs);
  return ticket;
}

void EpisodeTable::Placed(const v1::EpisodeIds& ids, const std::string& host, const std::string& sandbox_id,
                          const std::string& env_id) {
  {
    absl::MutexLock lock(&mu_);
    Batch* b = FindBatch(ids.batch_id());
    if (b == nullptr) return;
    b->at(ids.group_index(), ids.index_in_group()).host = host;
  }
  log_->RunPlaced(ids.episode_id(), host, sandbox_id, env_id);
}

std::vector<std::shared_ptr<RunControl>> EpisodeTable::Running(const std::string& host) const {
  std::vector<std::shared_ptr<RunControl>> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, b] : batches_) {
    if (b.running == 0) continue;
    for (const Episode& e : b.episodes) {
      if (e.state == State::kRunning && (host.empty() || e.host == host)) out.push_back(e.control);
    }
  }
  return out;
}

size_t EpisodeTable::RunningCount(const std::string& host) const { return Running(host).size(); }

FinishOutcome EpisodeTable::Finish(const EpisodeTicket& ticket, v1::EpisodeResult result) {
  const v1::EpisodeIds& ids = ticket.ids;
  std::vector<std::shared_ptr<RunControl>> stop;
  FinishOutcome outcome = FinishOutcome::kRecorded;
  uint32_t next_attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    Batch* b = FindBatch(ids.batch_id());
    if (b == nullptr) return FinishOutcome::kDropped;
    const uint32_t g = ids.group_index(), i = ids.index_in_group();
    Episode& e = b->at(g, i);
    if (e.state != State::kRunning || e.control != ticket.control) return FinishOutcome::kDropped;
    --b->running;
    e.control.reset();
    e.host.clear();
    const FinishDecision decision =
        DecideFinish({.reason = ticket.control->reason(),
                      .final_run = ticket.control->final(),
                      .batch_cancelled = b->cancelled,
                      .replace_failures = b->spec.group_failure_policy() == v1::GROUP_FAILURE_POLICY_REPLACE,
                      .too_stale = TooStale(*b, result),
                      .stale_runs = e.stale_runs,
                      .attempt = e.attempt,
                      .max_attempts = ticket.max_attempts,
                      .status = result.status(),
                      .failure_class = result.failure_class()});
    switch (decision.step) {
      case FinishStep::kDropRedundant:
        e.state = State::kEnded;
        b->MarkRedundant(g, i);
        --pending_;
        outcome = FinishOutcome::kDropped;
        break;
      case FinishStep::kStaleRerun:
        ++e.stale_runs;
        ++b->stale_reruns;
        if (observer() != nullptr) observer()->StaleRerun();
        [[fallthrough]];
      case FinishStep::kRequeue:
        Enqueue(*b, g, i);
        outcome = FinishOutcome::kRequeued;
        next_attempt = e.attempt;
        break;
      case FinishStep::kRetry:
        ++e.attempt;
        ++b->retries;
        // Back off before the retry (doubling, capped, jittered): a restarting service gets time to come back.
        e.not_before = clock_->Now() + RetryDelay(retry_backoff_, e.attempt, ticket.ids.seed());
        Enqueue(*b, g, i);
        outcome = FinishOutcome::kRetried;
        next_attempt = e.attempt;
        break;
      case FinishStep::kRecord:
        if (decision.give_up_stale) MarkTooStale(result, b->spec.max_staleness());
        Record(*b, g, i, std::move(result), &stop);
        break;
    }
    if (b->terminal() && b->end_time == absl::InfinitePast()) b->end_time = clock_->Now();
    Touch(*b);
  }
  if (outcome == FinishOutcome::kRequeued || outcome == FinishOutcome::kRetried) {
    log_->RunEnded(ids.episode_id(), next_attempt);
  }
  for (auto& c : stop) c->Stop(StopReason::kRedundant, "the group completed without this extra episode");
  Changed();
  return outcome;
}

void EpisodeTable::Record(Batch& b, uint32_t g, uint32_t i, v1::EpisodeResult result,
                          std::vector<std::shared_ptr<RunControl>>* stop) {
  Episode& e = b.at(g, i);
  Group& group = b.groups[g];
  e.state = State::kEnded;
  --pending_;
  if (group.complete_at != 0 || group.state == GroupState::kSurplus || group.counted >= b.spec.group_size()) {
    // The group already has its group_size results (or is surplus): this one is an extra, never delivered.
    b.MarkRedundant(g, i);
    return;
  }
  const uint64_t seq = next_seq_++;
  e.seq = seq;
  e.status = result.status();
  if (result.has_reward() && result.status() == v1::EPISODE_STATUS_FINISHED) e.reward = result.reward();
  if (result.has_first_policy_version()) e.first_version = result.first_policy_version();
  e.order_version = e.first_version.value_or(policy_version_);
  e.usage = UsageTotalsOf(result.usage());
  const bool completes = b.CountEnded(g, i, result.status(), e.reward);
  result.set_cursor(absl::StrCat(seq));
  e.result = result.SerializeAsString();
  Journal(b, g, i, result, false);
  if (completes) Decide(b, g, seq, stop);
  if (b.tasks[g]->has_branch()) EndOrphans(b, g, stop);
  if (b.terminal()) b.end_time = clock_->Now();
}

void EpisodeTable::Journal(Batch& b, uint32_t g, uint32_t i, const v1::EpisodeResult& result, bool redundant) {
  Episode& e = b.at(g, i);
  ++e.writing;
  e.committed = false;
  const std::string batch_id = b.spec.batch_id();
  const uint64_t seq = e.seq;
  log_->AddResult(seq, result, redundant, [this, batch_id, g, i, seq](absl::Status s) {
    // A failed journal write leaves the result in memory only; it is still delivered (the episode did end).
    (void)s;
    Committed(batch_id, g, i, seq);
  });
}

void EpisodeTable::Committed(const std::string& batch_id, uint32_t g, uint32_t i, uint64_t seq) {
  std::optional<std::string> driven;  // a trainer-driven environment episode's result, for its trainer
  {
    absl::MutexLock lock(&mu_);
    Batch* b = FindBatch(batch_id);
    if (b == nullptr) return;
    Episode& e = b->at(g, i);
    if (e.seq != seq || e.writing == 0 || --e.writing > 0) return;
    e.committed = true;
    if (!e.acked && e.counted_in_group) unacked_[seq] = Where{batch_id, g, i};
    if (hooks_.on_driven_result && b->tasks[g]->env_server().trainer_driven() && !restoring_) driven = e.result;
    Touch(*b);
  }
  Changed();
  v1::EpisodeResult result;
  if (driven && result.ParseFromString(*driven)) hooks_.on_driven_result(result);
}

v1::EpisodeResult EpisodeTable::QueuedResult(const Batch& b, uint32_t g, uint32_t i, v1::EpisodeStatus status,
                                             v1::EpisodePhase phase, const std::string& message) const {
  v1::EpisodeResult r;
  *r.mutable_ids() = Ids(b, g, i);
  r.set_status(status);
  r.set_failed_phase(phase);
  if (status == v1::EPISODE_STATUS_TIMEOUT) r.set_failure_class(v1::FAILURE_CLASS_INFRA);
  r.set_failure_message(message);
  const absl::Time now = clock_->Now();
  ToProto(now - b.create_time, r.mutable_timings()->mutable_queue());
  ToProto(now, r.mutable_timings()->mutable_end_time());
  return r;
}

absl::StatusOr<uint32_t> EpisodeTable::Cancel(const v1::CancelRequest& request) {
  std::string batch_id;
  std::optional<uint32_t> group, index;
  switch (request.target_case()) {
    case v1::CancelRequest::kEpisodeId: {
      auto ref = ParseEpisodeId(request.episode_id());
      if (!ref.ok()) return ref.status();
      batch_id = ref->batch_id;
      group = ref->group_index;
      index = ref->index_in_group;
      break;
    }
    case v1::CancelRequest::kGroupId: {
      auto ref = ParseGroupId(request.group_id());
      if (!ref.ok()) return ref.status();
      batch_id = ref->batch_id;
      group = ref->group_index;
      break;
    }
    case v1::CancelRequest::kBatchId: batch_id = request.batch_id(); break;
    default: return absl::InvalidArgumentError("a target is required: episode_id, group_id or batch_id");
  }
  const std::string why = request.reason().empty() ? "cancelled" : absl::StrCat("cancelled: ", request.reason());
  std::vector<std::shared_ptr<RunControl>> redundant, targets;
  uint32_t cancelled = 0;
  bool whole_batch = false;
  {
    absl::MutexLock lock(&mu_);
    Batch* b = FindBatch(batch_id);
    if (b == nullptr) return absl::NotFoundError(absl::StrCat("no batch '", batch_id, "'"));
    if (group && (*group >= b->tasks.size() || (index && *index >= b->per_group))) {
      return absl::NotFoundError(absl::StrCat("no such ", index ? "episode" : "group", " in batch '", batch_id, "'"));
    }
    whole_batch = !group;
    if (whole_batch && !b->terminal()) b->cancelled = b->closed = true;
    const uint32_t g0 = group.value_or(0), g1 = group ? *group + 1 : static_cast<uint32_t>(b->tasks.size());
    for (uint32_t g = g0; g < g1; ++g) {
      const uint32_t i0 = index.value_or(0), i1 = index ? *index + 1 : b->per_group;
      for (uint32_t i = i0; i < i1; ++i) {
        Episode& e = b->at(g, i);
        if (e.state == State::kQueued) {
          Dequeue(*b, g, i);
          ++cancelled;
          Record(*b, g, i, QueuedResult(*b, g, i, v1::EPISODE_STATUS_CANCELLED, v1::EPISODE_PHASE_QUEUE, why),
                 &redundant);
        } else if (e.state == State::kRunning && e.control && !e.control->stopped()) {
          ++cancelled;
          targets.push_back(e.control);
        }
      }
    }
    Touch(*b);
  }
  if (whole_batch) log_->BatchCancelled(batch_id);
  // Extras of groups completed just now stop as redundant, then the targets as cancelled (first reason wins).
  for (auto& c : redundant) c->Stop(StopReason::kRedundant, "the group completed without this extra episode");
  for (auto& c : targets) c->Stop(StopReason::kCancelled, why);
  Changed();
  return cancelled;
}

void EpisodeTable::ExpireDeadlines() {
  const absl::Time now = clock_->Now();
  std::vector<std::shared_ptr<RunControl>> stop, expired;
  bool closed = false;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, b] : batches_) {
      if (!b.spec.has_deadline() || FromProto(b.spec.deadline()) > now || b.terminal()) continue;
      b.closed = true;  // a dynamic batch opens no more groups
      for (uint32_t g = 0; g < b.tasks.size(); ++g) {
        for (uint32_t i = 0; i < b.per_group; ++i) {
          Episode& e = b.at(g, i);
          if (e.state == State::kQueued) {
            Dequeue(b, g, i);
            Record(b, g, i,
                   QueuedResult(b, g, i, v1::EPISODE_STATUS_TIMEOUT, v1::EPISODE_PHASE_DEADLINE,
                                "the batch deadline passed before the episode started"),
                   &stop);
          } else if (e.state == State::kRunning && e.control) {
            expired.push_back(e.control);
          }
        }
      }
      if (b.terminal() && b.end_time == absl::InfinitePast()) b.end_time = now;
      Touch(b);
      closed = true;
    }
  }
  for (auto& c : stop) c->Stop(StopReason::kRedundant, "the group completed without this extra episode");
  for (auto& c : expired) c->Stop(StopReason::kDeadline, "the batch deadline passed");
  if (closed) Changed();
}

}  // namespace corral::scheduler
