// Exec and ExecInteractive calls. ExecStreamReactor writes an execution's events as it makes them ready:
// `started`, output chunks, `keepalive` while silent, `exited`. A write is in flight at most once; while the
// client is slow the execution's bounded buffer fills and the process blocks (backpressure). Ending the call
// early kills the process. ExecInteractive adds streamed stdin, flow-controlled: the next message is read once
// the previous chunk is in the process's pipe.
#pragma once

#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/core/clock.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

// `Base` is grpc::ServerWriteReactor<v1::ExecEvent> or grpc::ServerBidiReactor<v1::ExecInput, v1::ExecEvent>.
template <class Base>
class ExecStreamReactor : public Base {
 public:
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 protected:
  explicit ExecStreamReactor(Clock* clock) : clock_(clock) {}
  virtual ~ExecStreamReactor() = default;

  // Streams `execution`'s events from now on.
  void Begin(std::shared_ptr<Execution> execution, absl::Duration keepalive_interval);
  // Ends the call with `status` (killing the process if one runs) once no write is in flight.
  void Abort(const absl::Status& status);

  // Shared with the execution's callbacks and the keepalive timer, which may outlive the reactor.
  struct State {
    absl::Mutex mu;
    ExecStreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::shared_ptr<Execution> execution_;
  bool finished_ = false;  // guarded by state_->mu

 private:
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);
  void ArmKeepalive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);

  Clock* const clock_;
  v1::ExecEvent event_;
  bool writing_ = false;                        // guarded by state_->mu
  bool exit_sent_ = false;                      // guarded by state_->mu
  bool keepalive_due_ = false;                  // guarded by state_->mu
  std::optional<grpc::Status> pending_finish_;  // guarded by state_->mu
  absl::Duration keepalive_interval_ = absl::Seconds(10);
  Clock::TimerId keepalive_timer_ = 0;
};

class ExecReactor final : public ExecStreamReactor<grpc::ServerWriteReactor<v1::ExecEvent>> {
 public:
  ExecReactor(SandboxManager* sandboxes, ExecManager* execs, const CallAuthenticator* auth, Clock* clock,
              grpc::CallbackServerContext* ctx, const v1::ExecRequest& request);
};

class ExecInteractiveReactor final : public ExecStreamReactor<grpc::ServerBidiReactor<v1::ExecInput, v1::ExecEvent>> {
 public:
  ExecInteractiveReactor(SandboxManager* sandboxes, ExecManager* execs, const CallAuthenticator* auth, Clock* clock,
                         grpc::CallbackServerContext* ctx);
  void OnReadDone(bool ok) override;

 private:
  void Start();
  void Attach();  // `attach` instead of `start`: take up a carried process's stream
  void ReadNext();
  void ReadNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);

  SandboxManager* const sandboxes_;
  ExecManager* const execs_;
  const CallAuthenticator* const auth_;
  grpc::CallbackServerContext* const ctx_;
  v1::ExecInput input_;
  bool started_ = false;  // only touched by OnReadDone, which gRPC never runs concurrently
};

}  // namespace corral::sandbox
