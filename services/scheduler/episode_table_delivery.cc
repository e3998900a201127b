// EpisodeTable, the delivery side: acknowledgements, what result streams may send and when a batch's stream is
// complete, and progress counts. (The lifecycle side — submit, run, finish, cancel, restore — is episode_table.cc.)
#include "services/scheduler/episode_table.h"

#include "absl/strings/str_cat.h"

namespace corral::scheduler {

absl::StatusOr<uint32_t> EpisodeTable::Ack(const std::vector<std::string>& episode_ids,
                                           std::function<void(absl::Status, uint32_t)> durable) {
  if (episode_ids.empty()) return absl::InvalidArgumentError("episode_ids must not be empty");
  std::vector<std::string> newly;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<Batch*, Episode*>> targets;
    for (const auto& id : episode_ids) {
      auto ref = ParseEpisodeId(id, "episode_ids");
      if (!ref.ok()) return absl::NotFoundError(absl::StrCat("unknown episode '", id, "'"));
      Batch* b = FindBatch(ref->batch_id);
      if (b == nullptr || ref->group_index >= b->tasks.size() || ref->index_in_group >= b->per_group) {
        return absl::NotFoundError(absl::StrCat("unknown episode '", id, "'"));
      }
      Episode& e = b->episodes[ref->group_index * b->per_group + ref->index_in_group];
      if (e.seq == 0 || !e.committed) {
        return absl::FailedPreconditionError(absl::StrCat("episode '", id, "' has no result yet"));
      }
      targets.emplace_back(b, &e);
    }
    for (size_t k = 0; k < targets.size(); ++k) {
      auto [b, e] = targets[k];
      if (e->acked) continue;
      e->acked = true;
      if (!e->delivered) {
        e->delivered = true;
        ++b->delivered;
      }
      ++b->acked;
      unacked_.erase(e->seq);
      std::string().swap(e->result);
      Touch(*b);
      newly.push_back(episode_ids[k]);
    }
  }
  const auto count = static_cast<uint32_t>(newly.size());
  if (newly.empty()) {
    if (durable) durable(absl::OkStatus(), 0);
  } else {
    log_->Acked(newly, [durable = std::move(durable), count](absl::Status s) {
      if (durable) durable(s, count);
    });
  }
  return count;
}

// ---------------------------------------------------------------------------------------------- streams

std::vector<EpisodeTable::Delivery> EpisodeTable::Deliverable(const std::string& batch_id, uint64_t after,
                                                              bool whole_groups, size_t limit) const {
  std::vector<Delivery> out;
  absl::MutexLock lock(&mu_);
  if (!whole_groups) {
    for (auto it = unacked_.upper_bound(after); it != unacked_.end() && out.size() < limit; ++it) {
      if (!batch_id.empty() && it->second.batch_id != batch_id) continue;
      const Batch* b = FindBatch(it->second.batch_id);
      const Episode& e = b->episodes[it->second.group * b->per_group + it->second.index];
      out.push_back(Delivery{it->first, e.result, EpisodeId(it->second.batch_id, it->second.group, it->second.index)});
    }
    return out;
  }
  for (auto it = group_completions_.upper_bound(after); it != group_completions_.end() && out.size() < limit; ++it) {
    if (!batch_id.empty() && it->second.batch_id != batch_id) continue;
    const Batch* b = FindBatch(it->second.batch_id);
    const uint32_t g = it->second.group;
    std::vector<Delivery> group;
    bool ready = true;
    for (uint32_t i = 0; i < b->per_group; ++i) {
      const Episode& e = b->episodes[g * b->per_group + i];
      if (!e.counted_in_group) continue;
      if (!e.committed) ready = false;
      if (!e.acked) group.push_back(Delivery{it->first, e.result, EpisodeId(it->second.batch_id, g, i)});
    }
    if (!ready) break;  // keep group order: wait for this one's journal writes
    for (auto& d : group) out.push_back(std::move(d));
  }
  return out;
}

void EpisodeTable::MarkDelivered(const std::string& episode_id) {
  auto ref = ParseEpisodeId(episode_id);
  if (!ref.ok()) return;
  absl::MutexLock lock(&mu_);
  Batch* b = FindBatch(ref->batch_id);
  if (b == nullptr) return;
  Episode& e = b->episodes[ref->group_index * b->per_group + ref->index_in_group];
  if (e.delivered) return;
  e.delivered = true;
  ++b->delivered;
  Touch(*b);
}

bool EpisodeTable::StreamComplete(const std::string& batch_id, uint64_t sent_upto, bool whole_groups) const {
  absl::MutexLock lock(&mu_);
  const Batch* b = FindBatch(batch_id);
  if (b == nullptr || !b->terminal()) return false;
  for (uint32_t g = 0; g < b->tasks.size(); ++g) {
    for (uint32_t i = 0; i < b->per_group; ++i) {
      const Episode& e = b->episodes[g * b->per_group + i];
      if (!e.counted_in_group || e.acked) continue;
      if (!e.committed) return false;
      const uint64_t position = whole_groups ? b->group_complete_at[g] : e.seq;
      if (position > sent_upto) return false;
    }
  }
  return true;
}

uint64_t EpisodeTable::LastPosition() const {
  absl::MutexLock lock(&mu_);
  return next_seq_ - 1;
}

v1::Batch EpisodeTable::Progress(const std::string& batch_id, uint64_t* version) const {
  absl::MutexLock lock(&mu_);
  if (!batch_id.empty()) {
    const Batch* b = FindBatch(batch_id);
    if (b == nullptr) return v1::Batch();
    if (version) *version = b->version;
    return Describe(*b);
  }
  if (version) *version = version_;
  v1::Batch all;
  all.set_state(v1::BATCH_STATE_COMPLETE);
  v1::EpisodeCounts* c = all.mutable_counts();
  double reward_sum = 0;
  uint32_t reward_n = 0, ended = 0;
  for (const auto& [id, b] : batches_) {
    const v1::Batch d = Describe(b);
    if (d.state() == v1::BATCH_STATE_RUNNING) all.set_state(v1::BATCH_STATE_RUNNING);
    const v1::EpisodeCounts& x = d.counts();
    c->set_total(c->total() + x.total());
    c->set_queued(c->queued() + x.queued());
    c->set_running(c->running() + x.running());
    c->set_finished(c->finished() + x.finished());
    c->set_failed(c->failed() + x.failed());
    c->set_timeout(c->timeout() + x.timeout());
    c->set_cancelled(c->cancelled() + x.cancelled());
    c->set_no_data(c->no_data() + x.no_data());
    c->set_delivered(c->delivered() + x.delivered());
    c->set_acked(c->acked() + x.acked());
    c->set_retries(c->retries() + x.retries());
    c->set_redundant_cancelled(c->redundant_cancelled() + x.redundant_cancelled());
    reward_sum += b.reward_sum;
    reward_n += b.reward_n;
    ended += b.ended;
  }
  all.set_task_count(static_cast<uint32_t>(batches_.size()));
  all.set_progress(c->total() == 0 ? 1.0 : static_cast<double>(ended) / c->total());
  if (reward_n > 0) all.set_mean_reward(reward_sum / reward_n);
  return all;
}

}  // namespace corral::scheduler
