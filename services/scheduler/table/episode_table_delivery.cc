// EpisodeTable, the delivery side: acknowledgements, what result streams may send and when a batch's stream is
// complete, and progress counts. (The lifecycle side — submit, run, finish, cancel — is episode_table.cc; a
// restart's restore is episode_table_restore.cc.)
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {
namespace {

// Adds every count (uint32 field) of `x` into `into`, a message of the same type.
void AddCounts(const google::protobuf::Message& x, google::protobuf::Message* into) {
  const google::protobuf::Reflection* r = into->GetReflection();
  const google::protobuf::Descriptor* d = into->GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const google::protobuf::FieldDescriptor* f = d->field(k);
    if (f->is_repeated() || f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT32) continue;
    r->SetUInt32(into, f, r->GetUInt32(*into, f) + r->GetUInt32(x, f));
  }
}

}  // namespace

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
      Episode& e = b->at(ref->group_index, ref->index_in_group);
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

EpisodeTable::DeliveryPage EpisodeTable::Deliverable(const std::string& batch_id, uint64_t after,
                                                     const std::set<uint64_t>& sent, bool whole_groups,
                                                     size_t limit) const {
  // Candidates by (oldest policy version, position); what is held or left for the next page blocks the cursor.
  struct Candidate {
    int64_t version;
    uint64_t position;
    const Batch* batch;
    uint32_t group, index;  // index unused for whole groups
    auto key() const { return std::pair(version, position); }
  };
  DeliveryPage page;
  std::vector<Candidate> candidates;
  absl::MutexLock lock(&mu_);
  const auto& index = whole_groups ? group_completions_ : unacked_;
  for (auto it = index.upper_bound(after); it != index.end(); ++it) {
    if (!batch_id.empty() && it->second.batch_id != batch_id) continue;
    if (sent.count(it->first)) continue;
    const Batch* b = FindBatch(it->second.batch_id);
    const uint32_t g = it->second.group;
    if (whole_groups) {
      bool ready = true, any = false;
      for (uint32_t i = 0; i < b->per_group; ++i) {
        const Episode& e = b->at(g, i);
        if (!e.counted_in_group || e.acked) continue;
        any = true;
        ready &= e.committed;
      }
      if (!any) continue;
      if (!ready) {
        page.blocked_at = std::min(page.blocked_at, it->first);
        continue;
      }
      candidates.push_back({b->groups[g].order_version, it->first, b, g, 0});
    } else {
      const Episode& e = b->at(g, it->second.index);
      if (!e.committed || (b->holds() && b->groups[g].complete_at == 0)) {
        page.blocked_at = std::min(page.blocked_at, it->first);
        continue;
      }
      candidates.push_back({e.order_version, it->first, b, g, it->second.index});
    }
  }
  const size_t head = std::min(limit, candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(head), candidates.end(),
                    [](const Candidate& x, const Candidate& y) { return x.key() < y.key(); });
  for (const Candidate& c : candidates) {
    if (page.items.size() >= limit) {
      page.blocked_at = std::min(page.blocked_at, c.position);
      continue;
    }
    const std::string& id = c.batch->spec.batch_id();
    if (!whole_groups) {
      const Episode& e = c.batch->at(c.group, c.index);
      page.items.push_back(Delivery{c.position, e.result, EpisodeId(id, c.group, c.index)});
      continue;
    }
    for (uint32_t i = 0; i < c.batch->per_group; ++i) {
      const Episode& e = c.batch->at(c.group, i);
      if (e.counted_in_group && !e.acked)
        page.items.push_back(Delivery{c.position, e.result, EpisodeId(id, c.group, i)});
    }
  }
  return page;
}

void EpisodeTable::MarkDelivered(const std::string& episode_id) {
  auto ref = ParseEpisodeId(episode_id);
  if (!ref.ok()) return;
  absl::MutexLock lock(&mu_);
  Batch* b = FindBatch(ref->batch_id);
  if (b == nullptr) return;
  Episode& e = b->at(ref->group_index, ref->index_in_group);
  if (e.delivered) return;
  e.delivered = true;
  ++b->delivered;
  if (observer() != nullptr && e.first_version)
    observer()->Delivered(std::max<int64_t>(0, policy_version_ - *e.first_version));
  Touch(*b);
}

size_t EpisodeTable::AwaitingAck() const {
  absl::MutexLock lock(&mu_);
  return unacked_.size();
}

bool EpisodeTable::StreamComplete(const std::string& batch_id, uint64_t sent_upto, bool whole_groups) const {
  absl::MutexLock lock(&mu_);
  const Batch* b = FindBatch(batch_id);
  if (b == nullptr || !b->terminal()) return false;
  for (uint32_t g = 0; g < b->tasks.size(); ++g) {
    for (uint32_t i = 0; i < b->per_group; ++i) {
      const Episode& e = b->at(g, i);
      if (!e.counted_in_group || e.acked) continue;
      if (!e.committed) return false;
      const uint64_t position = whole_groups ? b->groups[g].complete_at : e.seq;
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
    AddCounts(d.counts(), c);
    AddCounts(d.groups(), all.mutable_groups());
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
