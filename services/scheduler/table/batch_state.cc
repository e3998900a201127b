#include "services/scheduler/table/batch_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/scheduler/table/group_filter.h"

namespace corral::scheduler {

const char* GroupOutcome(GroupState s) {
  switch (s) {
    case GroupState::kPassed: return "passed";
    case GroupState::kFiltered: return "filtered";
    case GroupState::kDropped: return "dropped";
    case GroupState::kSurplus: return "surplus";
    default: return "undecided";
  }
}

bool BatchState::holds() const {
  return dynamic() || HasBounds(spec.group_filter()) || spec.group_failure_policy() == v1::GROUP_FAILURE_POLICY_DROP;
}

uint32_t BatchState::budget() const {
  const auto tasks_n = static_cast<uint32_t>(tasks.size());
  return spec.max_groups() == 0 ? tasks_n : std::min(spec.max_groups(), tasks_n);
}

bool BatchState::wants_groups() const {
  if (closed) return false;
  if (dynamic()) return passed < spec.target_groups() && opened < budget();
  return stream() && opened < tasks.size();
}

bool BatchState::terminal() const {
  return queued == 0 && running == 0 && undecided == 0 && !wants_groups() && (!stream() || input_closed || closed);
}

FinishDecision DecideFinish(const FinishFacts& f) {
  if (f.reason == StopReason::kRedundant) return {.step = FinishStep::kDropRedundant};
  if (f.final_run) return {.step = FinishStep::kRecord};
  if (f.reason == StopReason::kRequeue && !f.batch_cancelled) return {.step = FinishStep::kRequeue};
  // A stale result runs again unless the run was stopped or its batch cancelled; an episode too stale
  // kMaxStaleRuns times is given up rather than run forever (the trainer keeps outpacing it).
  if (f.too_stale && f.reason == StopReason::kNone && !f.batch_cancelled) {
    if (f.stale_runs + 1 < kMaxStaleRuns) return {.step = FinishStep::kStaleRerun};
    return {.step = FinishStep::kRecord, .give_up_stale = true};
  }
  const bool infra = f.status == v1::EPISODE_STATUS_FAILED && f.failure_class == v1::FAILURE_CLASS_INFRA;
  // GROUP_FAILURE_POLICY_REPLACE: any failure gets a fresh run (within max_attempts), not only the cluster's.
  const bool replace =
      f.replace_failures && (f.status == v1::EPISODE_STATUS_FAILED || f.status == v1::EPISODE_STATUS_TIMEOUT ||
                             f.status == v1::EPISODE_STATUS_NO_DATA);
  const bool stopped_for_good =
      f.batch_cancelled || f.reason == StopReason::kCancelled || f.reason == StopReason::kDeadline;
  if ((infra || replace) && f.attempt < f.max_attempts && !stopped_for_good) return {.step = FinishStep::kRetry};
  return {.step = FinishStep::kRecord};
}

void MarkTooStale(v1::EpisodeResult& result, uint32_t max_staleness) {
  result.clear_reward();
  result.clear_trajectory();
  result.set_status(v1::EPISODE_STATUS_FAILED);
  result.set_failure_class(v1::FAILURE_CLASS_INFRA);
  result.set_failed_phase(v1::EPISODE_PHASE_EPISODE);
  result.set_failure_message(absl::StrCat("each of ", kMaxStaleRuns, " runs ended up more than max_staleness (",
                                          max_staleness, ") policy versions behind; given up"));
}

bool BatchState::CountEnded(uint32_t g, uint32_t i, v1::EpisodeStatus status, std::optional<double> reward) {
  Episode& e = at(g, i);
  e.counted_in_group = true;
  ++ended;
  ++by_status[status];
  usage += e.usage;
  if (reward && status == v1::EPISODE_STATUS_FINISHED) {
    reward_sum += *reward;
    ++reward_n;
  }
  return ++groups[g].counted == spec.group_size();
}

void BatchState::UncountEnded(uint32_t g, uint32_t i) {
  Episode& e = at(g, i);
  e.counted_in_group = false;
  --groups[g].counted;
  --ended;
  --by_status[e.status];
  usage -= e.usage;
  if (e.reward && e.status == v1::EPISODE_STATUS_FINISHED) {
    reward_sum -= *e.reward;
    --reward_n;
  }
}

void BatchState::MarkRedundant(uint32_t g, uint32_t i) {
  at(g, i).redundant = true;
  ++redundant_cancelled;
}

void BatchState::StartGroup(uint32_t g) {
  if (groups[g].started) return;
  groups[g].started = true;
  ++started_groups;
}

}  // namespace corral::scheduler
