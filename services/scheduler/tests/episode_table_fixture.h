// The episode table's test fixture: a journal that records what it is asked, and helpers to drive the table.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "services/scheduler/table/episode_table.h"

namespace corral::scheduler::testing_support {

using ::testing::ElementsAre;
using ::testing::Pair;

// Records what the table asks to make durable. AddResult is called with the table's lock held, so its `done`
// (which takes the lock again) is kept here and run by Commit(), as the real journal runs it on its own thread.
class FakeLog final : public EpisodeLog {
 public:
  void AddBatch(const v1::BatchSpec& spec, const std::string&, absl::Time,
                const std::vector<std::shared_ptr<const v1::Task>>&, std::function<void(absl::Status)> done) override {
    batches.push_back(spec.batch_id());
    done(absl::OkStatus());
  }
  void RunStarted(const std::string& id, uint32_t attempt, uint32_t) override { started.emplace_back(id, attempt); }
  void RunPlaced(const std::string&, const std::string&, const std::string&, const std::string&) override {}
  void RunEnded(const std::string& id, uint32_t next_attempt) override { run_ended.emplace_back(id, next_attempt); }
  void AddResult(uint64_t, const v1::EpisodeResult& result, bool redundant,
                 std::function<void(absl::Status)> done) override {
    results.push_back(result.ids().episode_id());
    journaled.push_back({result, redundant});
    uncommitted.push_back(std::move(done));
  }
  void ResultWithdrawn(uint64_t, const std::string& id, uint32_t, uint32_t) override { withdrawn.push_back(id); }
  void Acked(const std::vector<std::string>& ids, std::function<void(absl::Status)> done) override {
    acked.insert(acked.end(), ids.begin(), ids.end());
    done(absl::OkStatus());
  }
  void BatchCancelled(const std::string& id) override { cancelled.push_back(id); }
  void TasksAppended(const std::string& id, uint32_t first, const std::vector<std::shared_ptr<const v1::Task>>& tasks,
                     bool close_input, std::function<void(absl::Status)> done) override {
    appended.push_back(absl::StrCat(id, "@", first, "+", tasks.size(), close_input ? " closed" : ""));
    done(append_status);
  }

  void Commit() {
    auto dones = std::move(uncommitted);
    uncommitted.clear();
    for (auto& done : dones) done(absl::OkStatus());
  }

  std::vector<std::string> batches, results, acked, cancelled, withdrawn, appended;
  absl::Status append_status;                                 // what TasksAppended answers
  std::vector<std::pair<v1::EpisodeResult, bool>> journaled;  // every AddResult: the result, redundant
  std::vector<std::pair<std::string, uint32_t>> started, run_ended;
  std::vector<std::function<void(absl::Status)>> uncommitted;
};

inline v1::BatchSpec Spec(const std::string& id, uint32_t group_size, uint32_t redundancy = 0, int32_t priority = 0) {
  v1::BatchSpec s;
  s.set_batch_id(id);
  s.set_group_size(group_size);
  s.set_redundancy(redundancy);
  s.set_priority(priority);
  return WithDefaults(s, SubmitLimits{}, /*random_seed=*/7);
}

inline v1::EpisodeResult Result(v1::EpisodeStatus status, v1::FailureClass failure = v1::FAILURE_CLASS_UNSPECIFIED) {
  v1::EpisodeResult r;
  r.set_status(status);
  r.set_failure_class(failure);
  if (status == v1::EPISODE_STATUS_FINISHED) r.set_reward(1.0);
  return r;
}
inline v1::EpisodeResult Finished() { return Result(v1::EPISODE_STATUS_FINISHED); }
inline v1::EpisodeResult InfraFailure() { return Result(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA); }

inline v1::CancelRequest CancelBatch(const std::string& id) {
  v1::CancelRequest r;
  r.set_batch_id(id);
  r.set_reason("user");
  return r;
}

inline bool Any(const v1::Task&) { return true; }

// A journaled batch of one task, as Restore reads it back.
inline Snapshot::BatchRow Row(const v1::BatchSpec& spec, absl::Time create_time, bool cancelled = false) {
  auto task = std::make_shared<v1::Task>();
  task->set_id("t0");
  return {.spec = spec, .digest = "d", .create_time = create_time, .cancelled = cancelled, .tasks = {task}};
}

class EpisodeTableTest : public ::testing::Test {
 protected:
  EpisodeTableTest() { Reset(1000); }
  void Reset(int64_t max_pending, TableHooks hooks = {}) {
    table_ =
        std::make_unique<EpisodeTable>(&clock_, &log_, SubmitLimits{}, max_pending, RetryBackoff{}, std::move(hooks));
  }

  // `shape`, when given, changes each task before it is submitted.
  absl::StatusOr<v1::Batch> Submit(const v1::BatchSpec& spec, int tasks, const std::string& digest = "digest",
                                   const std::function<void(v1::Task&)>& shape = nullptr) {
    std::vector<std::shared_ptr<const v1::Task>> list;
    for (int k = 0; k < tasks; ++k) {
      auto t = std::make_shared<v1::Task>();
      t->set_id("t" + std::to_string(k));
      t->set_prompt("p");
      if (shape) shape(*t);
      list.push_back(std::move(t));
    }
    absl::StatusOr<v1::Batch> out = absl::UnknownError("done was not called");
    table_->Submit(spec, digest, std::move(list), [&](absl::StatusOr<v1::Batch> b) { out = std::move(b); });
    return out;
  }
  EpisodeTicket Start() {
    std::optional<EpisodeTicket> t = table_->StartNext(Any);
    if (!t) ADD_FAILURE() << "nothing queued";
    return t.value_or(EpisodeTicket{});
  }
  // Finish, then the journal confirms (unless the test holds commits).
  FinishOutcome End(const EpisodeTicket& ticket, v1::EpisodeResult result) {
    *result.mutable_ids() = ticket.ids;
    const FinishOutcome out = table_->Finish(ticket, std::move(result));
    if (!hold_commits_) log_.Commit();
    return out;
  }
  absl::StatusOr<uint32_t> Cancel(v1::CancelRequest request) {
    auto out = table_->Cancel(request);
    log_.Commit();
    return out;
  }
  std::vector<std::string> Deliverable(const std::string& batch = "", uint64_t after = 0, bool whole = false) {
    std::vector<std::string> ids;
    for (const auto& d : table_->Deliverable(batch, after, {}, whole, 100).items) ids.push_back(d.episode_id);
    return ids;
  }
  // The deliverable results themselves.
  std::vector<v1::EpisodeResult> Results(const std::string& batch) {
    std::vector<v1::EpisodeResult> out;
    for (const auto& d : table_->Deliverable(batch, 0, {}, false, 100).items) {
      EXPECT_TRUE(out.emplace_back().ParseFromString(d.result));
    }
    return out;
  }
  v1::EpisodeCounts Counts(const std::string& batch) { return table_->GetBatch(batch).value().counts(); }

  FakeClock clock_;
  FakeLog log_;
  std::unique_ptr<EpisodeTable> table_;
  bool hold_commits_ = false;
};

}  // namespace corral::scheduler::testing_support
