// The EpisodeTable's branching: parked children, the split, orphans, and what a restart does with a tree.
#include "absl/strings/str_cat.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/table/branch_plan.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

namespace {

std::optional<BranchPlan> GroupPlan(const BatchState& b, uint32_t g) {
  return PlanOf(*b.tasks[g], b.spec.group_size());
}

}  // namespace

void EpisodeTable::Park(Batch& b, uint32_t g, uint32_t i) {
  Episode& e = b.at(g, i);
  e.state = State::kQueued;
  e.parked = true;
  ++b.queued;
}

void EpisodeTable::OpenBranching(Batch& b, uint32_t g) {
  for (uint32_t i = 0; i < b.per_group; ++i) {
    if (b.at(g, i).state == State::kEnded) continue;
    if (i == 0) {
      Enqueue(b, g, i);
    } else {
      Park(b, g, i);
    }
  }
}

std::vector<EpisodeTicket> EpisodeTable::Branch(const EpisodeTicket& parent, size_t level) {
  std::vector<EpisodeTicket> out;
  std::vector<uint32_t> runs;
  {
    absl::MutexLock lock(&mu_);
    Batch* b = FindBatch(parent.ids.batch_id());
    if (b == nullptr) return out;
    const uint32_t g = parent.ids.group_index(), i = parent.ids.index_in_group();
    const Episode& p = b->at(g, i);
    if (p.state != State::kRunning || p.control != parent.control) return out;
    const std::optional<BranchPlan> plan = GroupPlan(*b, g);
    if (!plan || level >= plan->levels()) return out;
    parent.control->set_final();
    for (uint32_t c : plan->Children(i, level)) {
      Episode& e = b->at(g, c);
      if (e.state != State::kQueued || !e.parked) continue;
      Dequeue(*b, g, c);
      e.state = State::kRunning;
      e.control = std::make_shared<RunControl>();
      e.control->set_final();
      e.host = p.host;  // a fork lives on its parent's host
      runs.push_back(++e.runs);
      ++b->running;
      EpisodeTicket t;
      t.ids = Ids(*b, g, c);
      t.task = b->tasks[g];
      t.control = e.control;
      t.env_id = EnvId(t.ids.episode_id(), e.runs);
      t.queued_since = b->create_time;
      if (b->spec.has_deadline()) t.batch_deadline = FromProto(b->spec.deadline());
      t.max_attempts = 1;
      t.tenant = b->spec.tenant();
      t.branch_plan = plan;
      out.push_back(std::move(t));
    }
    Touch(*b);
  }
  for (size_t k = 0; k < out.size(); ++k) log_->RunStarted(out[k].ids.episode_id(), out[k].ids.attempt(), runs[k]);
  Changed();
  return out;
}

void EpisodeTable::EndOrphans(Batch& b, uint32_t g, std::vector<std::shared_ptr<RunControl>>* stop) {
  const std::optional<BranchPlan> plan = GroupPlan(b, g);
  if (!plan) return;
  for (uint32_t j = 0; j < b.per_group; ++j) {
    Episode& e = b.at(g, j);
    if (e.state != State::kQueued || !e.parked) continue;
    const uint32_t up = plan->Parent(j);
    const Episode& parent = b.at(g, up);
    if (parent.state != State::kEnded) continue;
    // The parent ended without splitting for it: it ends as its parent did (a parent that finished had no
    // turn left to split at: its token budget ran out).
    const std::optional<v1::EpisodeResult> pr = Parsed(parent);
    v1::EpisodeStatus status =
        parent.status == v1::EPISODE_STATUS_UNSPECIFIED ? v1::EPISODE_STATUS_CANCELLED : parent.status;
    if (status == v1::EPISODE_STATUS_FINISHED || status == v1::EPISODE_STATUS_FILTERED) {
      status = v1::EPISODE_STATUS_FAILED;
    }
    const v1::EpisodePhase phase =
        pr && pr->failed_phase() != v1::EPISODE_PHASE_UNSPECIFIED ? pr->failed_phase() : v1::EPISODE_PHASE_AGENT;
    const std::string why = pr && !pr->failure_message().empty() ? absl::StrCat(": ", pr->failure_message()) : "";
    Dequeue(b, g, j);
    v1::EpisodeResult r =
        QueuedResult(b, g, j, status, phase,
                     absl::StrCat("its branch never started: its parent episode ", EpisodeId(b.spec.batch_id(), g, up),
                                  " ended ", v1::EpisodeStatus_Name(parent.status), " before splitting", why));
    if (status == v1::EPISODE_STATUS_FAILED) {
      r.set_failure_class(pr && pr->failure_class() != v1::FAILURE_CLASS_UNSPECIFIED ? pr->failure_class()
                                                                                     : v1::FAILURE_CLASS_AGENT);
    }
    *r.mutable_branch() = BranchInfoOf(*plan, b.spec.batch_id(), g, j);
    Record(b, g, j, std::move(r), stop);  // ends its own orphans in turn
  }
}

bool EpisodeTable::RestoreBranching(Batch& b, uint32_t g, std::vector<std::shared_ptr<RunControl>>* stop) {
  const std::optional<BranchPlan> plan = GroupPlan(b, g);
  if (!plan) return false;
  bool split = false;
  for (uint32_t i = 1; i < b.per_group; ++i) split = split || b.at(g, i).runs > 0;
  if (!split) {
    for (uint32_t i = 0; i < b.per_group; ++i) pending_ += b.at(g, i).state == State::kEnded ? 0 : 1;
    OpenBranching(b, g);
    EndOrphans(b, g, stop);  // a root that ended before its children's results were journaled
    return true;
  }
  for (uint32_t i = 0; i < b.per_group; ++i) {
    if (b.at(g, i).state == State::kEnded) continue;
    ++pending_;  // Record counts it out
    v1::EpisodeResult r =
        QueuedResult(b, g, i, v1::EPISODE_STATUS_FAILED, v1::EPISODE_PHASE_EPISODE,
                     "the scheduler restarted after this episode's group had branched: a branch's sandbox and "
                     "conversation are not kept across a restart");
    r.set_failure_class(v1::FAILURE_CLASS_INFRA);
    *r.mutable_branch() = BranchInfoOf(*plan, b.spec.batch_id(), g, i);
    Record(b, g, i, std::move(r), stop);
  }
  return true;
}

}  // namespace corral::scheduler
