// EpisodeTable, the group side: opening groups (all at once, or as dynamic sampling needs them), deciding a
// completed group (failure policy, filter), the surplus beyond target_groups, and staleness (admission, and
// results withdrawn when a policy update makes them too stale). The lifecycle side is episode_table.cc.
#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "services/scheduler/table/episode_table.h"
#include "services/scheduler/table/group_filter.h"

namespace corral::scheduler {
namespace {

const char* StatusWord(v1::EpisodeStatus s) {
  switch (s) {
    case v1::EPISODE_STATUS_FAILED: return "FAILED";
    case v1::EPISODE_STATUS_TIMEOUT: return "TIMEOUT";
    case v1::EPISODE_STATUS_CANCELLED: return "CANCELLED";
    case v1::EPISODE_STATUS_NO_DATA: return "NO_DATA";
    default: return "without finishing";
  }
}

}  // namespace

void EpisodeTable::Open(Batch& b, uint32_t g) {
  b.groups[g].state = GroupState::kOpen;
  ++b.opened;
  ++b.undecided;
  b.expected += b.spec.group_size();
  if (b.tasks[g]->has_branch()) {
    OpenBranching(b, g);
  } else {
    for (uint32_t i = 0; i < b.per_group; ++i) Enqueue(b, g, i);
  }
  pending_ += b.per_group;
}

void EpisodeTable::OpenMore(Batch& b) {
  if (b.stream()) {
    while (b.wants_groups() && b.undecided < b.spec.groups_in_flight()) Open(b, b.opened);
    return;
  }
  while (b.wants_groups()) {
    // Enough groups in flight that, at the pass rate estimated so far (Laplace's rule, at least 1 in 8; the target
    // itself before any group was decided), the target is reached.
    const uint32_t decided = b.passed + b.filtered_groups + b.dropped;
    const double rate = decided == 0 ? 1.0 : std::max((b.passed + 1.0) / (decided + 2.0), 1.0 / 8);
    const auto want = static_cast<uint32_t>(std::ceil((b.spec.target_groups() - b.passed) / rate - 1e-9));
    if (b.undecided >= want) break;
    Open(b, b.opened);
  }
}

void EpisodeTable::Decide(Batch& b, uint32_t g, uint64_t position, std::vector<std::shared_ptr<RunControl>>* stop) {
  Group& group = b.groups[g];
  // The extras still queued are dropped; the running ones are stopped.
  for (uint32_t j = 0; j < b.per_group; ++j) Unwant(b, g, j, stop);
  Judge(b, g);
  if (observer() != nullptr) observer()->GroupDecided(GroupOutcome(group.state));
  group.complete_at = position;
  group_completions_[position] = Where{b.spec.batch_id(), g, 0};
  if (b.dynamic() && b.passed >= b.spec.target_groups()) {
    CancelSurplus(b, stop);
  } else if (b.incremental()) {
    OpenMore(b);
  }
}

bool EpisodeTable::Unwant(Batch& b, uint32_t g, uint32_t i, std::vector<std::shared_ptr<RunControl>>* stop) {
  Episode& e = b.at(g, i);
  if (e.state == State::kQueued) {
    Dequeue(b, g, i);
    e.state = State::kEnded;
    b.MarkRedundant(g, i);
    --pending_;
    return true;
  }
  if (e.state != State::kRunning) return false;
  if (e.control) stop->push_back(e.control);
  return true;
}

void EpisodeTable::Append(const std::string& batch_id, std::vector<std::shared_ptr<const v1::Task>> tasks,
                          bool close_input, std::function<void(absl::StatusOr<v1::Batch>)> done) {
  uint32_t first = 0;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    const Batch* b = FindBatch(batch_id);
    if (b == nullptr) {
      refused = absl::NotFoundError(absl::StrCat("no batch '", batch_id, "'"));
    } else if (!b->stream()) {
      refused =
          absl::FailedPreconditionError(absl::StrCat("batch '", batch_id, "' is not a stream (groups_in_flight)"));
    } else if (b->input_closed || b->closed) {
      refused = absl::FailedPreconditionError(absl::StrCat(
          "stream '", batch_id, "' takes no more tasks: ", b->cancelled ? "cancelled" : "its input is closed"));
    } else if (appending_.count(batch_id)) {
      refused = absl::FailedPreconditionError(absl::StrCat("an append to stream '", batch_id, "' is in flight; retry"));
    } else if (static_cast<int64_t>(b->tasks.size() + tasks.size()) > limits_.max_batch_tasks) {
      refused = absl::ResourceExhaustedError(absl::StrCat("stream '", batch_id, "' would have ",
                                                          b->tasks.size() + tasks.size(), " tasks; at most ",
                                                          limits_.max_batch_tasks, " (max_batch_tasks)"));
    } else {
      std::set<std::string> ids;
      for (const auto& t : b->tasks) ids.insert(t->id());
      for (const auto& t : tasks) {
        if (ids.count(t->id())) {
          refused =
              absl::AlreadyExistsError(absl::StrCat("task '", t->id(), "' is already in stream '", batch_id, "'"));
          break;
        }
      }
    }
    if (refused.ok()) {
      first = static_cast<uint32_t>(b->tasks.size());
      appending_.insert(batch_id);
    }
  }
  if (!refused.ok()) return done(refused);
  auto shared = std::make_shared<std::vector<std::shared_ptr<const v1::Task>>>(std::move(tasks));
  log_->TasksAppended(
      batch_id, first, *shared, close_input,
      [this, batch_id, shared, close_input, done = std::move(done)](absl::Status s) {
        v1::Batch out;
        {
          absl::MutexLock lock(&mu_);
          appending_.erase(batch_id);
          Batch* b = FindBatch(batch_id);
          if (s.ok() && b != nullptr) {
            AppendTasks(*b, std::move(*shared));
            b->input_closed |= close_input;
            OpenMore(*b);
            Touch(*b);
            out = Describe(*b);
          }
        }
        if (!s.ok()) {
          done(absl::UnavailableError(absl::StrCat("the journal could not record the tasks: ", s.message())));
          return;
        }
        Changed();
        done(std::move(out));
      });
}

void EpisodeTable::AppendTasks(Batch& b, std::vector<std::shared_ptr<const v1::Task>> tasks) {
  for (auto& t : tasks) b.tasks.push_back(std::move(t));
  b.episodes.resize(b.tasks.size() * b.per_group);
  b.groups.resize(b.tasks.size());
}

void EpisodeTable::CancelSurplus(Batch& b, std::vector<std::shared_ptr<RunControl>>* stop) {
  for (uint32_t g = 0; g < b.tasks.size(); ++g) {
    Group& group = b.groups[g];
    if (group.state != GroupState::kOpen) continue;
    group.state = GroupState::kSurplus;
    if (group.started) ++b.rejected_started;
    if (observer() != nullptr) observer()->GroupDecided(GroupOutcome(group.state));
    --b.undecided;
    ++b.surplus;
    b.expected -= b.spec.group_size();
    for (uint32_t i = 0; i < b.per_group; ++i) {
      Episode& e = b.at(g, i);
      if (Unwant(b, g, i, stop)) continue;
      if (std::optional<v1::EpisodeResult> r = e.counted_in_group ? Parsed(e) : std::nullopt) {
        // Held until the group's decision, so never sent: it becomes an extra, like redundancy's.
        Rewrite(b, g, i, std::move(*r), true);
      }
    }
  }
}

void EpisodeTable::Rewrite(Batch& b, uint32_t g, uint32_t i, v1::EpisodeResult result, bool redundant) {
  Episode& e = b.at(g, i);
  b.UncountEnded(g, i);
  if (redundant) {
    b.MarkRedundant(g, i);
    unacked_.erase(e.seq);
  } else {  // counted again as what it now says
    e.status = result.status();
    if (!result.has_reward()) e.reward.reset();
    (void)b.CountEnded(g, i, e.status, e.reward);  // (the group was complete, and stays so)
  }
  e.result = result.SerializeAsString();
  Journal(b, g, i, result, redundant);
}

bool EpisodeTable::TooStale(const Batch& b, const v1::EpisodeResult& result) const {
  return b.spec.has_max_staleness() && result.status() == v1::EPISODE_STATUS_FINISHED &&
         result.has_first_policy_version() &&
         result.first_policy_version() < policy_version_ - static_cast<int64_t>(b.spec.max_staleness());
}

bool EpisodeTable::Admitted(const Batch& b, uint32_t g) const {
  if (!b.spec.has_max_staleness() || b.spec.step_groups() == 0 || b.groups[g].started) return true;
  // AReaL's rule: accepted + running groups <= (k + 1 + versions trained since the batch's base) x groups per
  // version. A group filtered, dropped or cancelled as surplus is neither, so it frees its place: otherwise a
  // filter passing fewer than all groups would leave the trainer short of a step forever.
  const int64_t steps = std::max<int64_t>(0, policy_version_ - b.spec.base_policy_version());
  const int64_t allowed = (static_cast<int64_t>(b.spec.max_staleness()) + 1 + steps) * b.spec.step_groups();
  return b.started_groups - b.rejected_started < allowed;
}

void EpisodeTable::SetPolicyVersion(int64_t version) {
  {
    absl::MutexLock lock(&mu_);
    if (version == policy_version_) return;
    policy_version_ = version;
    for (auto& [id, b] : batches_) {
      if (!b.spec.has_max_staleness()) continue;
      const int64_t oldest = version - static_cast<int64_t>(b.spec.max_staleness());
      for (uint32_t g = 0; g < b.tasks.size(); ++g) {
        bool any_sent = false;
        for (uint32_t i = 0; i < b.per_group; ++i) any_sent |= b.at(g, i).delivered;
        // A decided group already (partly) sent keeps its results: a group is delivered whole or not at all.
        if (b.groups[g].complete_at != 0 && any_sent) continue;
        for (uint32_t i = 0; i < b.per_group; ++i) {
          const Episode& e = b.at(g, i);
          if (!e.counted_in_group || e.delivered || e.status != v1::EPISODE_STATUS_FINISHED || !e.first_version ||
              *e.first_version >= oldest) {
            continue;
          }
          if (e.stale_runs + 1 < kMaxStaleRuns) {
            Withdraw(b, g, i);
          } else if (std::optional<v1::EpisodeResult> r = Parsed(e)) {
            MarkTooStale(*r, b.spec.max_staleness());
            Rewrite(b, g, i, std::move(*r), false);
          }
        }
      }
      Touch(b);
    }
    ++version_;
  }
  Changed();
}

void EpisodeTable::Withdraw(Batch& b, uint32_t g, uint32_t i) {
  Episode& e = b.at(g, i);
  Group& group = b.groups[g];
  if (group.complete_at != 0) {  // only a passed group can hold a FINISHED result
    group_completions_.erase(group.complete_at);
    group.complete_at = 0;
    if (group.state == GroupState::kPassed) --b.passed;
    group.state = GroupState::kOpen;
    ++b.undecided;
  }
  b.UncountEnded(g, i);
  unacked_.erase(e.seq);
  log_->ResultWithdrawn(e.seq, EpisodeId(b.spec.batch_id(), g, i), e.attempt, e.runs);
  e.seq = 0;
  e.committed = false;
  e.writing = 0;
  e.status = v1::EPISODE_STATUS_UNSPECIFIED;
  e.reward.reset();
  e.first_version.reset();
  std::string().swap(e.result);
  ++e.stale_runs;
  ++b.stale_reruns;
  if (observer() != nullptr) observer()->StaleRerun();
  Enqueue(b, g, i);
  ++pending_;
}

void EpisodeTable::Judge(Batch& b, uint32_t g) {
  Group& group = b.groups[g];
  // FILTERED counts as finished: after a restart the verdict is taken again from the journaled results.
  std::vector<double> rewards;
  std::string why;
  group.order_version = INT64_MAX;
  for (uint32_t i = 0; i < b.per_group; ++i) {
    const Episode& e = b.at(g, i);
    if (!e.counted_in_group) continue;
    group.order_version = std::min(group.order_version, e.order_version);
    const bool finished = e.status == v1::EPISODE_STATUS_FINISHED || e.status == v1::EPISODE_STATUS_FILTERED;
    if (finished && e.reward) {
      rewards.push_back(*e.reward);
    } else if (!finished && why.empty() && b.spec.group_failure_policy() == v1::GROUP_FAILURE_POLICY_DROP) {
      why = absl::StrCat("group dropped: episode ", i, " ended ", StatusWord(e.status));
    }
  }
  if (!why.empty()) {
    group.state = GroupState::kDropped;
    ++b.dropped;
  } else if (why = FilterGroup(b.spec.group_filter(), rewards); !why.empty()) {
    group.state = GroupState::kFiltered;
    ++b.filtered_groups;
  } else {
    group.state = GroupState::kPassed;
    ++b.passed;
  }
  --b.undecided;
  if (group.state == GroupState::kPassed) return;
  if (group.started) ++b.rejected_started;
  for (uint32_t i = 0; i < b.per_group; ++i) {
    const Episode& e = b.at(g, i);
    if (!e.counted_in_group || e.status != v1::EPISODE_STATUS_FINISHED) continue;
    std::optional<v1::EpisodeResult> r = Parsed(e);
    if (!r) continue;
    r->set_status(v1::EPISODE_STATUS_FILTERED);
    r->set_failure_message(why);
    Rewrite(b, g, i, std::move(*r), false);
  }
}

void EpisodeTable::RestoreDecision(Batch& b, uint32_t g, uint64_t position) {
  Judge(b, g);
  b.groups[g].complete_at = position;
  group_completions_[position] = Where{b.spec.batch_id(), g, 0};
}

std::optional<v1::EpisodeResult> EpisodeTable::Parsed(const Episode& e) {
  v1::EpisodeResult r;
  if (e.result.empty() || !r.ParseFromString(e.result)) return std::nullopt;
  return r;
}

}  // namespace corral::scheduler
