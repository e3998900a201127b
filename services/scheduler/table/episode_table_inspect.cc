// EpisodeTable's read-only views for the rollout inspector.
#include "absl/strings/str_cat.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

absl::StatusOr<std::vector<EpisodeTable::EpisodeRow>> EpisodeTable::Episodes(const std::string& batch_id) const {
  absl::MutexLock lock(&mu_);
  const Batch* b = FindBatch(batch_id);
  if (b == nullptr) return absl::NotFoundError(absl::StrCat("no batch '", batch_id, "'"));
  std::vector<EpisodeRow> rows;
  rows.reserve(b->episodes.size());
  for (uint32_t g = 0; g < b->tasks.size(); ++g) {
    for (uint32_t i = 0; i < b->per_group; ++i) {
      const Episode& e = b->at(g, i);
      EpisodeRow row;
      row.episode_id = EpisodeId(batch_id, g, i);
      row.task = b->tasks[g];
      row.group_index = g;
      row.index_in_group = i;
      row.attempt = e.attempt;
      row.state = e.state == State::kQueued    ? "queued"
                  : e.state == State::kRunning ? "running"
                  : e.state == State::kEnded   ? "ended"
                                               : "unstarted";
      row.status = e.status;
      row.reward = e.reward;
      row.redundant = e.redundant;
      row.acked = e.acked;
      row.host = e.host;
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

absl::StatusOr<std::string> EpisodeTable::UnackedResult(const std::string& episode_id) const {
  auto ref = ParseEpisodeId(episode_id);
  if (!ref.ok()) return absl::NotFoundError(absl::StrCat("unknown episode '", episode_id, "'"));
  absl::MutexLock lock(&mu_);
  const Batch* b = FindBatch(ref->batch_id);
  if (b == nullptr || ref->group_index >= b->tasks.size() || ref->index_in_group >= b->per_group) {
    return absl::NotFoundError(absl::StrCat("unknown episode '", episode_id, "'"));
  }
  const Episode& e = b->at(ref->group_index, ref->index_in_group);
  if (e.acked) return absl::OutOfRangeError(absl::StrCat("episode '", episode_id, "' was acknowledged"));
  if (e.seq == 0 || !e.committed || e.result.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("episode '", episode_id, "' has no result yet"));
  }
  return e.result;
}

}  // namespace corral::scheduler
