// EpisodeTable, the restart side: the state rebuilt from a journal snapshot — batches, the groups a dynamic batch
// or a stream had opened, results and group verdicts taken again, the queue refilled — before anything is served.
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

void EpisodeTable::Restore(const Snapshot& snapshot, int64_t policy_version) {
  restoring_ = true;
  RestoreLocked(snapshot);
  SetPolicyVersion(policy_version);
  restoring_ = false;
}

void EpisodeTable::RestoreLocked(const Snapshot& snapshot) {
  absl::MutexLock lock(&mu_);
  for (const auto& row : snapshot.batches) {
    Batch& b = batches_[row.spec.batch_id()];
    b.order = next_order_++;
    b.spec = row.spec;
    b.digest = row.digest;
    b.create_time = row.create_time;
    b.tasks = row.tasks;
    b.cancelled = row.cancelled;
    b.closed = row.cancelled;
    b.input_closed = row.input_closed;
    b.per_group = b.spec.group_size() + b.spec.redundancy();
    b.episodes.resize(b.tasks.size() * b.per_group);
    b.groups.resize(b.tasks.size());
  }
  // Groups open in task order: a dynamic batch or a stream had opened at least up to its last group with a run
  // or result (OpenMore then tops it up).
  std::map<Batch*, uint32_t> active;
  auto touch = [&](const std::string& episode_id) -> std::pair<Batch*, EpisodeRef> {
    auto ref = ParseEpisodeId(episode_id);
    if (!ref.ok()) return {nullptr, {}};
    Batch* b = FindBatch(ref->batch_id);
    if (b == nullptr || ref->group_index >= b->tasks.size() || ref->index_in_group >= b->per_group)
      return {nullptr, {}};
    uint32_t& n = active[b];
    n = std::max(n, ref->group_index + 1);
    return {b, *ref};
  };
  for (const auto& run : snapshot.runs) {
    auto [b, ref] = touch(run.episode_id);
    if (b == nullptr) continue;
    Episode& e = b->at(ref.group_index, ref.index_in_group);
    e.attempt = run.attempt;
    e.runs = run.runs;
    if (run.runs > 0) b->StartGroup(ref.group_index);
  }
  for (const auto& r : snapshot.results) touch(r.episode_id);
  for (auto& [id, b] : batches_) {
    const uint32_t open = b.incremental() ? active[&b] : static_cast<uint32_t>(b.tasks.size());
    for (uint32_t g = 0; g < open; ++g) {
      b.groups[g].state = GroupState::kOpen;
      ++b.opened;
      ++b.undecided;
      b.expected += b.spec.group_size();
    }
  }
  // Results in position order, so group completion positions come out as they were.
  for (const auto& r : snapshot.results) RestoreResult(r);
  std::vector<std::shared_ptr<RunControl>> none;
  for (auto& [id, b] : batches_) {
    if (b.dynamic() && b.passed >= b.spec.target_groups()) CancelSurplus(b, &none);
    for (uint32_t g = 0; g < b.tasks.size(); ++g) {
      if (b.groups[g].state == GroupState::kUnopened || b.groups[g].state == GroupState::kSurplus) continue;
      if (b.groups[g].complete_at == 0 && RestoreBranching(b, g, &none)) continue;
      for (uint32_t i = 0; i < b.per_group; ++i) {
        Episode& e = b.at(g, i);
        if (e.state == State::kEnded) continue;
        if (b.groups[g].complete_at != 0) {  // an extra of a completed group: dropped
          e.state = State::kEnded;
          b.MarkRedundant(g, i);
          continue;
        }
        Enqueue(b, g, i);
        ++pending_;
      }
    }
    OpenMore(b);
  }
  // Cancel promised that nothing of a cancelled batch starts again: what it had not ended ends CANCELLED now.
  for (auto& [id, b] : batches_) {
    if (!b.cancelled) continue;
    for (uint32_t g = 0; g < b.tasks.size(); ++g) {
      for (uint32_t i = 0; i < b.per_group; ++i) {
        if (b.at(g, i).state != State::kQueued) continue;
        Dequeue(b, g, i);
        Record(b, g, i,
               QueuedResult(b, g, i, v1::EPISODE_STATUS_CANCELLED, v1::EPISODE_PHASE_QUEUE,
                            "cancelled (the batch was cancelled before the scheduler restarted)"),
               &none);
      }
    }
  }
  for (auto& [id, b] : batches_) {
    if (b.terminal()) b.end_time = b.create_time;
  }
}

void EpisodeTable::RestoreResult(const Snapshot::ResultRow& r) {
  auto ref = ParseEpisodeId(r.episode_id);
  if (!ref.ok()) return;
  Batch* b = FindBatch(ref->batch_id);
  if (b == nullptr || ref->group_index >= b->tasks.size() || ref->index_in_group >= b->per_group) return;
  const uint32_t g = ref->group_index, i = ref->index_in_group;
  b->StartGroup(g);  // (its runs may have been forgotten)
  Episode& e = b->at(g, i);
  e.state = State::kEnded;
  e.seq = r.seq;
  e.status = r.status;
  e.reward = r.reward;
  e.committed = true;
  e.acked = r.acked;
  e.result = r.result;
  next_seq_ = std::max(next_seq_, r.seq + 1);
  if (r.redundant) {
    b->MarkRedundant(g, i);
    return;
  }
  if (!e.result.empty()) {
    v1::EpisodeResult parsed;
    if (parsed.ParseFromString(e.result) && parsed.has_first_policy_version()) {
      e.first_version = parsed.first_policy_version();
      e.order_version = *e.first_version;
    }
  }
  v1::EpisodeUsage usage;
  if (usage.ParseFromString(r.usage)) e.usage = UsageTotalsOf(usage);
  const bool completes = b->CountEnded(g, i, r.status, r.reward);
  if (r.acked) {
    ++b->acked;
    ++b->delivered;
  } else {
    unacked_[r.seq] = Where{b->spec.batch_id(), g, i};
  }
  if (completes) RestoreDecision(*b, g, r.seq);
}

}  // namespace corral::scheduler
