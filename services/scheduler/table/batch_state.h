// One batch's state inside the EpisodeTable, as plain values: its episodes, its groups, the counters the table
// keeps as they change, and the predicates and decisions that read only them. No lock, no journal, no queue: the
// table owns those, and calls these under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/table/run_control.h"
#include "services/scheduler/table/usage_totals.h"

namespace corral::scheduler {

enum class EpisodeState : uint8_t { kUnopened, kQueued, kRunning, kEnded };

// A group (one task's group_size episodes, plus redundant extras). Groups open in task order: all at once, or as
// dynamic sampling needs them (target_groups); an opened group is decided once group_size have ended.
enum class GroupState : uint8_t { kUnopened, kOpen, kPassed, kFiltered, kDropped, kSurplus };

// "passed", "filtered", "dropped", "surplus" (what the metrics call a decided group), else "undecided".
const char* GroupOutcome(GroupState s);

struct BatchState {
  struct Episode {
    EpisodeState state = EpisodeState::kUnopened;
    bool counted_in_group = false;  // one of the first group_size to end: delivered
    bool redundant = false;         // ended without counting (an extra dropped once the group completed)
    bool committed = false, delivered = false, acked = false;
    bool parked = false;  // queued, but waiting for its parent's branch (Task.branch), not in the queue
    uint8_t writing = 0;  // journal writes of its result in flight (committed once none)
    uint32_t attempt = 1;
    uint32_t runs = 0;
    uint32_t stale_runs = 0;                       // runs whose result was too stale (max_staleness)
    uint64_t seq = 0;                              // result position, 0 = none
    absl::Time not_before = absl::InfinitePast();  // a retry waits out its back-off
    v1::EpisodeStatus status = v1::EPISODE_STATUS_UNSPECIFIED;
    std::optional<double> reward;
    UsageTotals usage;                     // what its result says it cost
    std::optional<int64_t> first_version;  // the result's first_policy_version
    int64_t order_version = 0;             // delivery order: first_version, else the version when it ended
    std::string result;                    // serialized, until acked
    std::string host;
    std::shared_ptr<RunControl> control;
  };
  struct Group {
    GroupState state = GroupState::kUnopened;
    bool started = false;       // an episode of it started (staleness admission counts groups)
    uint32_t counted = 0;       // ended episodes that count (up to group_size)
    uint64_t complete_at = 0;   // position at which it was decided (whole-group delivery), 0 = not yet
    int64_t order_version = 0;  // the oldest order_version of its results
  };

  uint64_t order = 0;
  v1::BatchSpec spec;
  std::string digest;
  absl::Time create_time, start_time = absl::InfinitePast(), end_time = absl::InfinitePast();
  std::vector<std::shared_ptr<const v1::Task>> tasks;
  uint32_t per_group = 1;         // group_size + redundancy
  std::vector<Episode> episodes;  // see at()
  std::vector<Group> groups;
  bool cancelled = false;
  bool closed = false;        // cancelled or past its deadline: opens no more groups
  bool input_closed = false;  // a stream's input was closed (AppendTasks close_input)
  uint32_t queued = 0, running = 0, ended = 0, retries = 0, redundant_cancelled = 0, delivered = 0, acked = 0;
  uint32_t expected = 0;  // results that will count: group_size per opened group (a surplus group: what ended)
  uint32_t opened = 0, started_groups = 0, undecided = 0;
  uint32_t rejected_started = 0;  // started groups then filtered, dropped or surplus: admission frees them
  uint32_t passed = 0, filtered_groups = 0, dropped = 0, surplus = 0, stale_reruns = 0;
  std::map<v1::EpisodeStatus, uint32_t> by_status;
  double reward_sum = 0;
  uint32_t reward_n = 0;
  UsageTotals usage;     // of the episodes counted in their group
  uint64_t version = 0;  // changes whenever anything a progress message shows does

  // Episode i of group g.
  Episode& at(uint32_t g, uint32_t i) { return episodes[g * per_group + i]; }
  const Episode& at(uint32_t g, uint32_t i) const { return episodes[g * per_group + i]; }

  bool dynamic() const { return spec.target_groups() > 0; }
  bool stream() const { return spec.groups_in_flight() > 0; }
  // Groups open as they are needed, not all at submission.
  bool incremental() const { return dynamic() || stream(); }
  // Results wait for their group's decision (dynamic sampling, a group filter, or the drop failure policy).
  bool holds() const;
  // Groups that may be opened: every task, or the generation budget of a dynamic batch.
  uint32_t budget() const;
  bool wants_groups() const;
  // Nothing queued, running or undecided, and nothing more will open.
  bool terminal() const;

  // The batch's rules for its counters, one method each, used as results come in and again when a restart
  // replays the journal (so the two cannot count differently).
  // Episode (g, i) ended with `status` (and `reward`, when FINISHED) and counts among its group's results:
  // counted, ended, by status, in the mean reward. True when it completes the group (group_size counted).
  bool CountEnded(uint32_t g, uint32_t i, v1::EpisodeStatus status, std::optional<double> reward);
  // Undoes CountEnded for an episode whose result is withdrawn (a stale rerun) or turned into an extra.
  void UncountEnded(uint32_t g, uint32_t i);
  // Episode (g, i) ended without counting: an extra its group did not need.
  void MarkRedundant(uint32_t g, uint32_t i);
  // An episode of group g started (admission counts started groups).
  void StartGroup(uint32_t g);
};

// What becomes of a run that ended, given the facts the table holds (FinishDecision decides, the table applies).
struct FinishFacts {
  StopReason reason = StopReason::kNone;
  bool final_run = false;  // RunControl::final(): recorded however it ended
  bool batch_cancelled = false;
  bool replace_failures = false;  // GROUP_FAILURE_POLICY_REPLACE
  bool too_stale = false;         // a FINISHED result older than max_staleness allows now
  uint32_t stale_runs = 0;        // earlier runs withdrawn as too stale
  uint32_t attempt = 1, max_attempts = 1;
  v1::EpisodeStatus status = v1::EPISODE_STATUS_UNSPECIFIED;
  v1::FailureClass failure_class = v1::FAILURE_CLASS_UNSPECIFIED;
};
enum class FinishStep {
  kDropRedundant,  // an extra stopped because its group completed: ends uncounted
  kRequeue,        // back to the queue, same attempt (drain, or a shutdown's requeue)
  kStaleRerun,     // back to the queue, same attempt: its result was too stale
  kRetry,          // back to the queue as the next attempt, after a back-off
  kRecord,         // the result is final
};
struct FinishDecision {
  FinishStep step = FinishStep::kRecord;
  bool give_up_stale = false;  // record it FAILED: too stale kMaxStaleRuns times (MarkTooStale)
};
FinishDecision DecideFinish(const FinishFacts& facts);

// Runs of one episode whose result was too stale before it is given up (FAILED, infra).
inline constexpr uint32_t kMaxStaleRuns = 3;
// Makes `result` the FAILED result of an episode given up for staleness.
void MarkTooStale(v1::EpisodeResult& result, uint32_t max_staleness);

}  // namespace corral::scheduler
