// The processes envd's Start began on this replica: each one's ExecInteractive call to its host (which holds its
// stdin), and its events as envd sends them, for the Start stream and any Connect streams following it. A process
// stays listed until it ends; its output then goes to whoever still reads, and it is gone (as envd forgets an
// exited process). Thread-safe: events arrive on gRPC threads, readers are coroutines woken through channels or
// by the clock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "corral/envd/process.pb.h"
#include "libs/core/clock.h"
#include "prometheus/gauge.h"
#include "services/sandbox_host/client/host_api.h"

namespace corral::sandbox_api {

// One process's envd events (data, end), kept within a bound (the oldest go first; a reader that fell behind
// skips them).
class EnvdProcess {
 public:
  EnvdProcess(Clock* clock, envd::ProcessConfig config, std::string tag)
      : clock_(clock), config_(std::move(config)), tag_(std::move(tag)) {}

  // An observer of the host's call that feeds `process` (held weakly: the call may outlive it) and tells `ended`
  // (may be empty) once it has ended: its exit, or the end of the call.
  static sandbox::ExecObserver Observe(std::weak_ptr<EnvdProcess> process,
                                       std::function<void(EnvdProcess& process)> ended);

  // The host's events, translated (on a gRPC thread).
  void OnEvent(const v1::ExecEvent& event);
  // The call ended: an end event when the host sent no exit (the stream broke).
  void OnDone(const absl::Status& status);

  struct Batch {
    std::vector<envd::ProcessEvent> events;
    bool ended = false;  // the last event (the end) is in `events` or was read before
  };
  // The events from `*next` on (advancing it), waiting on the clock until `until` for one when there is none yet.
  boost::asio::awaitable<Batch> Read(size_t* next, absl::Time until);
  // Where a reader that wants only what comes next starts.
  size_t end_index() const;
  // Drops the events before index `upto` (a process with one reader, which has read them).
  void Release(size_t upto);

  uint32_t pid() const;
  bool ended() const;
  const envd::ProcessConfig& config() const { return config_; }
  const std::string& tag() const { return tag_; }
  void set_call(std::shared_ptr<sandbox::InteractiveProcess> call) { call_ = std::move(call); }
  sandbox::InteractiveProcess* call() const { return call_.get(); }

 private:
  using Wake = boost::asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  void Append(envd::ProcessEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const envd::ProcessConfig config_;
  const std::string tag_;
  std::shared_ptr<sandbox::InteractiveProcess> call_;  // set once, before the process is listed
  mutable absl::Mutex mu_;
  uint32_t pid_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<envd::ProcessEvent> events_ ABSL_GUARDED_BY(mu_);
  size_t first_ ABSL_GUARDED_BY(mu_) = 0;  // the index of events_.front()
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Wake>> waiting_ ABSL_GUARDED_BY(mu_);
};

// The running processes of every sandbox, by sandbox (lease) id and pid.
class EnvdProcesses {
 public:
  // `count` (may be null) is kept at how many are listed.
  explicit EnvdProcesses(prometheus::Gauge* count = nullptr) : count_(count) {}

  void Add(const std::string& sandbox_id, std::shared_ptr<EnvdProcess> process);
  void Remove(const std::string& sandbox_id, uint32_t pid);
  std::shared_ptr<EnvdProcess> Find(const std::string& sandbox_id, uint32_t pid) const;
  // By tag (envd's ProcessSelector.tag); null when none.
  std::shared_ptr<EnvdProcess> FindTag(const std::string& sandbox_id, const std::string& tag) const;
  std::vector<std::shared_ptr<EnvdProcess>> List(const std::string& sandbox_id) const;
  std::vector<std::shared_ptr<EnvdProcess>> All() const;
  size_t size() const;

 private:
  prometheus::Gauge* const count_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::map<uint32_t, std::shared_ptr<EnvdProcess>>> by_sandbox_ ABSL_GUARDED_BY(mu_);
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace corral::sandbox_api
