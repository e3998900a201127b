// StreamResults: one reactor per stream, fed from the EpisodeTable. Results go out one write at a time in
// position order (at least once: a result is sent again on a later stream until acknowledged), interleaved with
// progress messages (at the start, then at most every 2 s while something changed). A batch stream ends OK once
// the batch has ended and every result was sent. The hub wakes every open stream when the table changes.
#pragma once

#include <deque>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler {

class ResultStreamReactor;

// The open streams. Thread-safe.
class ResultHub {
 public:
  void Add(ResultStreamReactor* stream);
  void Remove(ResultStreamReactor* stream);
  // Lets every open stream send what it can now.
  void NotifyAll();
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  std::set<ResultStreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
};

class ResultStreamReactor final : public grpc::ServerWriteReactor<v1::StreamResultsResponse> {
 public:
  // Starts streaming; `after` is the resume position (0 = from the oldest unacknowledged result).
  ResultStreamReactor(EpisodeTable* table, ResultHub* hub, v1::StreamResultsRequest request, uint64_t after);
  // Sends whatever is ready when nothing is being written.
  void Pump();

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void Refill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  EpisodeTable* const table_;
  ResultHub* const hub_;
  const v1::StreamResultsRequest request_;
  absl::Mutex mu_;
  // Every position at or below sent_upto_ was sent (it is the cursor); sent_ holds the positions above it sent
  // already (results go oldest policy version first, not in position order).
  uint64_t sent_upto_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> sent_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::StreamResultsResponse> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> pending_ids_ ABSL_GUARDED_BY(mu_);  // episode id per pending result ("" for progress)
  uint64_t progress_version_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  absl::Time progress_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace corral::scheduler
