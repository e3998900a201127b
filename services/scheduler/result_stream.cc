#include "services/scheduler/result_stream.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/scheduler/episode/trajectory_forms.h"

namespace corral::scheduler {

void ResultHub::Add(ResultStreamReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
}

void ResultHub::Remove(ResultStreamReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void ResultHub::NotifyAll() {
  // Under the hub's lock: a stream cannot be destroyed (OnDone removes it first) while it is pumped.
  absl::MutexLock lock(&mu_);
  for (ResultStreamReactor* s : streams_) s->Pump();
}

size_t ResultHub::size() const {
  absl::MutexLock lock(&mu_);
  return streams_.size();
}

ResultStreamReactor::ResultStreamReactor(EpisodeTable* table, ResultHub* hub, v1::StreamResultsRequest request,
                                         uint64_t after)
    : table_(table), hub_(hub), request_(std::move(request)), sent_upto_(after) {
  hub_->Add(this);
  Pump();
}

void ResultStreamReactor::Refill() {
  constexpr absl::Duration kProgressEvery = absl::Seconds(2);
  uint64_t version = 0;
  v1::Batch progress = table_->Progress(request_.batch_id(), &version);
  const absl::Time now = absl::Now();
  if (version != progress_version_ && now - progress_time_ >= kProgressEvery) {
    progress_version_ = version;
    progress_time_ = now;
    v1::StreamResultsResponse msg;
    *msg.mutable_progress() = std::move(progress);
    pending_.push_back(std::move(msg));
    pending_ids_.emplace_back();
  }
  EpisodeTable::DeliveryPage page =
      table_->Deliverable(request_.batch_id(), sent_upto_, sent_, request_.whole_groups(), /*limit=*/32);
  // A result's cursor: the highest position such that it and everything below it has been sent once this result
  // has (what the page holds back, and the page's later items, are not yet).
  std::vector<uint64_t> unsent_from(page.items.size() + 1, page.blocked_at);
  for (size_t k = page.items.size(); k-- > 0;) unsent_from[k] = std::min(unsent_from[k + 1], page.items[k].position);
  auto cursor = [&](uint64_t first_unsent) {
    const uint64_t upto = first_unsent == UINT64_MAX ? (sent_.empty() ? 0 : *sent_.rbegin()) : first_unsent - 1;
    return std::max(sent_upto_, upto);
  };
  for (size_t k = 0; k < page.items.size(); ++k) {
    EpisodeTable::Delivery& d = page.items[k];
    v1::StreamResultsResponse msg;
    v1::EpisodeResult* r = msg.mutable_result();
    if (!r->ParseFromString(d.result)) continue;
    if (request_.exclude_trajectories()) {
      r->clear_trajectory();
    } else if (r->has_trajectory()) {
      *r->mutable_trajectory() = ConvertTrajectory(r->trajectory(), request_.trajectory_format());
    }
    sent_.insert(d.position);
    r->set_cursor(absl::StrCat(cursor(unsent_from[k + 1])));
    pending_.push_back(std::move(msg));
    pending_ids_.push_back(std::move(d.episode_id));
  }
  sent_upto_ = cursor(page.blocked_at);
  sent_.erase(sent_.begin(), sent_.upper_bound(sent_upto_));
}

// Finish is called after the lock is released, and nothing of the reactor is touched after it: gRPC may run
// OnDone, which deletes the reactor, on another thread before Finish returns (the lock's release would then write
// into freed memory: a scheduler under faults aborted with absl's "Mutex unlocked when destroyed").
void ResultStreamReactor::Pump() {
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || finished_) return;
    if (pending_.empty()) Refill();
    if (!pending_.empty()) {
      writing_ = true;
      StartWrite(&pending_.front());
      return;
    }
    if (request_.batch_id().empty() ||
        !table_->StreamComplete(request_.batch_id(), sent_upto_, request_.whole_groups())) {
      return;
    }
    finished_ = true;
  }
  Finish(grpc::Status::OK);
}

void ResultStreamReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ok) {
      if (!pending_ids_.front().empty()) table_->MarkDelivered(pending_ids_.front());
      pending_.pop_front();
      pending_ids_.pop_front();
    } else if (finished_) {
      return;
    } else {
      finished_ = true;
    }
  }
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream broke"));
    return;
  }
  Pump();
}

void ResultStreamReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Finish(grpc::Status::CANCELLED);
}

void ResultStreamReactor::OnDone() {
  hub_->Remove(this);              // no Pump from the hub from here on
  { absl::MutexLock lock(&mu_); }  // and none still inside the lock (a reaction leaves it before it is deleted)
  delete this;
}

}  // namespace corral::scheduler
