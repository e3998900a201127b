// EpisodeTable's read-only views: batches (GetBatch, ListBatches) and, for the rollout inspector, episodes.
#include "absl/strings/str_cat.h"
#include "libs/api/pagination.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

v1::Batch EpisodeTable::Describe(const Batch& b) const {
  v1::Batch out;
  out.set_batch_id(b.spec.batch_id());
  out.set_state(b.cancelled ? v1::BATCH_STATE_CANCELLED
                            : (b.terminal() ? v1::BATCH_STATE_COMPLETE : v1::BATCH_STATE_RUNNING));
  *out.mutable_spec() = b.spec;
  out.set_task_count(static_cast<uint32_t>(b.tasks.size()));
  out.set_input_open(b.stream() && !b.input_closed && !b.closed);
  v1::EpisodeCounts* c = out.mutable_counts();
  c->set_total(b.expected);
  c->set_queued(b.queued);
  c->set_running(b.running);
  auto count = [&](v1::EpisodeStatus s) {
    auto it = b.by_status.find(s);
    return it == b.by_status.end() ? 0u : it->second;
  };
  c->set_finished(count(v1::EPISODE_STATUS_FINISHED));
  c->set_failed(count(v1::EPISODE_STATUS_FAILED));
  c->set_timeout(count(v1::EPISODE_STATUS_TIMEOUT));
  c->set_cancelled(count(v1::EPISODE_STATUS_CANCELLED));
  c->set_no_data(count(v1::EPISODE_STATUS_NO_DATA));
  c->set_delivered(b.delivered);
  c->set_acked(b.acked);
  c->set_retries(b.retries);
  c->set_redundant_cancelled(b.redundant_cancelled);
  c->set_filtered(count(v1::EPISODE_STATUS_FILTERED));
  c->set_stale_reruns(b.stale_reruns);
  v1::GroupCounts* gc = out.mutable_groups();
  gc->set_total(static_cast<uint32_t>(b.tasks.size()));
  gc->set_started(b.started_groups);
  gc->set_passed(b.passed);
  gc->set_filtered(b.filtered_groups);
  gc->set_dropped(b.dropped);
  gc->set_surplus(b.surplus);
  if (b.terminal()) {
    out.set_progress(1.0);
  } else if (b.dynamic()) {
    out.set_progress(static_cast<double>(b.passed) / b.spec.target_groups());
  } else {
    out.set_progress(b.expected == 0 ? 1.0 : static_cast<double>(b.ended) / b.expected);
  }
  if (b.reward_n > 0) out.set_mean_reward(b.reward_sum / b.reward_n);
  UsageTotalsToProto(b.usage, out.mutable_usage());
  ToProto(b.create_time, out.mutable_create_time());
  if (b.start_time != absl::InfinitePast()) ToProto(b.start_time, out.mutable_start_time());
  if (b.end_time != absl::InfinitePast()) ToProto(b.end_time, out.mutable_end_time());
  return out;
}

absl::StatusOr<v1::Batch> EpisodeTable::GetBatch(const std::string& batch_id, bool task_stats) const {
  absl::MutexLock lock(&mu_);
  const Batch* b = FindBatch(batch_id);
  if (b == nullptr) return absl::NotFoundError(absl::StrCat("no batch '", batch_id, "'"));
  v1::Batch out = Describe(*b);
  if (!task_stats) return out;
  for (uint32_t g = 0; g < b->tasks.size(); ++g) {
    const Group& gr = b->groups[g];
    if (gr.state == GroupState::kUnopened) continue;
    v1::TaskStats* t = out.add_task_stats();
    t->set_task_id(b->tasks[g]->id());
    double sum = 0;
    uint32_t positive = 0;
    UsageTotals usage;
    for (uint32_t i = 0; i < b->per_group; ++i) {
      const Episode& e = b->at(g, i);
      if (!e.counted_in_group) continue;
      usage += e.usage;
      t->set_episodes(t->episodes() + 1);
      if (!e.reward) continue;  // FINISHED, or FILTERED after finishing
      t->set_finished(t->finished() + 1);
      sum += *e.reward;
      if (*e.reward > 0) ++positive;
    }
    if (t->finished() > 0) {
      t->set_mean_reward(sum / t->finished());
      t->set_pass_rate(static_cast<double>(positive) / t->finished());
    }
    UsageTotalsToProto(usage, t->mutable_usage());
    if (gr.state == GroupState::kPassed) t->set_passed(true);
    if (gr.state == GroupState::kFiltered || gr.state == GroupState::kDropped) t->set_passed(false);
  }
  return out;
}

bool EpisodeTable::BatchExists(const std::string& batch_id) const {
  absl::MutexLock lock(&mu_);
  return FindBatch(batch_id) != nullptr;
}

absl::StatusOr<v1::ListBatchesResponse> EpisodeTable::ListBatches(const v1::ListBatchesRequest& request) const {
  auto page_size = PageSize(request.page_size());
  if (!page_size.ok()) return page_size.status();
  absl::MutexLock lock(&mu_);
  // Newest first: order keys descending, written so that a larger key sorts first ("o" + inverted order).
  std::vector<std::pair<std::string, const Batch*>> items;
  for (const auto& [id, b] : batches_) {
    items.emplace_back(absl::StrCat(absl::Dec(UINT64_MAX - b.order, absl::kZeroPad20)), &b);
  }
  std::sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  if (!request.page_token().empty() &&
      (request.page_token().size() != 20 || !std::all_of(request.page_token().begin(), request.page_token().end(),
                                                         [](char c) { return c >= '0' && c <= '9'; }))) {
    return absl::InvalidArgumentError("page_token was not issued by ListBatches");
  }
  v1::ListBatchesResponse out;
  out.set_next_page_token(FillPage(
      items, request.page_token(), *page_size, [](const auto& x) { return x.first; },
      [&](const auto& x) {
        const v1::Batch d = Describe(*x.second);
        return (request.state() == v1::BATCH_STATE_UNSPECIFIED || d.state() == request.state()) &&
               MatchesLabels(request.label_selector(), x.second->spec.labels());
      },
      [&](const auto& x) { *out.add_batches() = Describe(*x.second); }));
  return out;
}

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
