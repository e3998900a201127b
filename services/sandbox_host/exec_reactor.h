// ExecReactor: one Exec call. Starts the process, then writes its events as the execution makes them ready:
// `started`, output chunks, `keepalive` while silent, `exited`. A write is in flight at most once; while the
// client is slow the execution's bounded buffer fills and the process blocks (backpressure). Ending the call
// early kills the process.
#pragma once

#include <memory>

#include "absl/synchronization/mutex.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/core/clock.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/exec_manager.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

class ExecReactor final : public grpc::ServerWriteReactor<v1::ExecEvent> {
 public:
  ExecReactor(SandboxManager* sandboxes, ExecManager* execs, const CallAuthenticator* auth, Clock* clock,
              grpc::CallbackServerContext* ctx, const v1::ExecRequest& request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Shared with the execution's listener and the keepalive timer, which may outlive the reactor.
  struct State {
    absl::Mutex mu;
    ExecReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);
  void ArmKeepalive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);

  Clock* const clock_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::shared_ptr<Execution> execution_;
  v1::ExecEvent event_;
  bool writing_ = false;       // guarded by state_->mu
  bool exit_sent_ = false;     // guarded by state_->mu
  bool finished_ = false;      // guarded by state_->mu
  bool keepalive_due_ = false; // guarded by state_->mu
  absl::Duration keepalive_interval_ = absl::Seconds(10);
  Clock::TimerId keepalive_timer_ = 0;
};

}  // namespace corral::sandbox
