// The rollout inspector's data: batches with their counts and reward histograms, a batch's groups side by side,
// one episode's result with its trajectory in the TRAJECTORY form (messages, branches, token ids with the loss
// mask). Read-only; answers JSON documents for the inspector's web page (inspector_http.h serves them).
// Results come from the episode table until acknowledged, then from the journal for result_retention.
// Thread-safe (the table and the journal are).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

// A reward histogram: `bins` equal bins over [lo, hi], where lo <= 0 and hi >= 1 stretch to the rewards seen.
struct RewardHistogram {
  double lo = 0, hi = 1;
  std::vector<uint32_t> counts;
};
RewardHistogram HistogramOf(const std::vector<double>& rewards, int bins = 10);

class Inspector {
 public:
  // The serialized result of an acknowledged episode, if still retained (NOT_FOUND otherwise).
  using ArchiveReader = std::function<absl::StatusOr<std::string>(const std::string& episode_id)>;
  Inspector(const EpisodeTable* table, ArchiveReader archive) : table_(table), archive_(std::move(archive)) {}

  // {"batches": [Batch + "reward_histogram"], "next_page_token"}: newest first, `page_size` at most.
  absl::StatusOr<std::string> BatchesJson(int32_t page_size, const std::string& page_token) const;
  // {"batch": Batch, "reward_histogram", "groups": [{"group_index", "group_id", "task_id", "prompt",
  //  "mean_reward", "episodes": [{"episode_id", "index", "state", "status", "reward", ...}]}]}.
  absl::StatusOr<std::string> BatchJson(const std::string& batch_id) const;
  // {"source": "table"|"journal", "result": EpisodeResult with a TRAJECTORY-form trajectory}.
  absl::StatusOr<std::string> EpisodeJson(const std::string& episode_id) const;

 private:
  const EpisodeTable* const table_;
  const ArchiveReader archive_;
};

}  // namespace corral::scheduler
