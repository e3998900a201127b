#include "services/sandbox_host/exec_reactor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/sandbox_ops.h"

namespace corral::sandbox {

// ---------------------------------------------------------------------------------------- ExecStreamReactor

template <class Base>
void ExecStreamReactor<Base>::Begin(std::shared_ptr<Execution> execution, absl::Duration keepalive_interval) {
  execution_ = std::move(execution);
  keepalive_interval_ = keepalive_interval;
  {
    absl::MutexLock lock(&state_->mu);
    state_->reactor = this;
    event_.mutable_started()->set_pid(execution_->pid());
    event_.mutable_started()->set_process_id(execution_->id());
    ToProto(execution_->start_time(), event_.mutable_started()->mutable_start_time());
    writing_ = true;
    this->StartWrite(&event_);
  }
  // Outside the lock: SetListener calls the listener at once if output is already waiting.
  std::weak_ptr<State> weak = state_;
  execution_->SetListener([weak] {
    if (auto state = weak.lock()) {
      absl::MutexLock l(&state->mu);
      if (state->reactor != nullptr) state->reactor->Pump();
    }
  });
  absl::MutexLock lock(&state_->mu);
  ArmKeepalive();
}

template <class Base>
void ExecStreamReactor<Base>::Abort(const absl::Status& status) {
  if (execution_) execution_->Kill(ExitReason::kCallEnded);
  absl::MutexLock lock(&state_->mu);
  if (finished_) return;
  if (writing_) {
    pending_finish_ = ToGrpcStatus(status);
  } else {
    FinishLocked(ToGrpcStatus(status));
  }
}

template <class Base>
void ExecStreamReactor<Base>::FinishLocked(const grpc::Status& status) {
  finished_ = true;
  this->Finish(status);
}

template <class Base>
void ExecStreamReactor<Base>::ArmKeepalive() {
  std::weak_ptr<State> weak = state_;
  keepalive_timer_ = clock_->RunAfter(keepalive_interval_, [weak] {
    if (auto state = weak.lock()) {
      absl::MutexLock l(&state->mu);
      if (state->reactor == nullptr || state->reactor->finished_) return;
      state->reactor->keepalive_due_ = true;
      state->reactor->Pump();
      state->reactor->ArmKeepalive();
    }
  });
}

template <class Base>
void ExecStreamReactor<Base>::Pump() {
  if (writing_ || finished_ || exit_sent_) return;
  std::optional<OutputEvent> ev = execution_->Next();
  if (!ev) {
    if (!keepalive_due_) return;
    keepalive_due_ = false;
    event_.Clear();
    ToProto(clock_->Now() - execution_->start_time(), event_.mutable_keepalive()->mutable_elapsed());
  } else {
    keepalive_due_ = false;
    event_.Clear();
    switch (ev->kind) {
      case OutputEvent::kStdout: event_.set_stdout(std::move(ev->data)); break;
      case OutputEvent::kStderr: event_.set_stderr(std::move(ev->data)); break;
      case OutputEvent::kExit:
        ToProto(ev->exit, event_.mutable_exited());
        exit_sent_ = true;
        break;
    }
  }
  writing_ = true;
  this->StartWrite(&event_);
}

template <class Base>
void ExecStreamReactor<Base>::OnWriteDone(bool ok) {
  bool kill = false;
  {
    absl::MutexLock lock(&state_->mu);
    writing_ = false;
    if (finished_) return;
    if (!ok) {
      kill = true;
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    } else if (pending_finish_) {
      FinishLocked(*pending_finish_);
    } else if (exit_sent_) {
      FinishLocked(grpc::Status::OK);
    } else {
      Pump();
    }
  }
  if (kill) execution_->Kill(ExitReason::kCallEnded);
}

template <class Base>
void ExecStreamReactor<Base>::OnCancel() {
  // The call ended early (cancelled, or its deadline passed): a process never outlives its call.
  if (execution_) execution_->Kill(ExitReason::kCallEnded);
  absl::MutexLock lock(&state_->mu);
  if (!finished_ && !writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled"));
}

template <class Base>
void ExecStreamReactor<Base>::OnDone() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->reactor = nullptr;
    clock_->Cancel(keepalive_timer_);
  }
  if (execution_) execution_->SetListener(nullptr);
  delete this;
}

template class ExecStreamReactor<grpc::ServerWriteReactor<v1::ExecEvent>>;
template class ExecStreamReactor<grpc::ServerBidiReactor<v1::ExecInput, v1::ExecEvent>>;

namespace {

absl::Duration KeepaliveInterval(const v1::ExecRequest& request) {
  if (request.has_keepalive_interval() && FromProto(request.keepalive_interval()) >= absl::Milliseconds(100)) {
    return FromProto(request.keepalive_interval());
  }
  return absl::Seconds(10);
}

ExecOptions StreamOptions(ProcessKind kind, const v1::ExecRequest& request) {
  ExecOptions extra;
  extra.kind = kind;
  extra.stdin_data = request.stdin();
  extra.max_output_bytes = request.max_output_bytes();
  return extra;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- ExecReactor

ExecReactor::ExecReactor(SandboxManager* sandboxes, ExecManager* execs, const CallAuthenticator* auth, Clock* clock,
                         grpc::CallbackServerContext* ctx, const v1::ExecRequest& request)
    : ExecStreamReactor(clock) {
  auto execution = StartCommand(*sandboxes, *execs, *auth, *ctx, request.sandbox_id(), request.command(),
                                StreamOptions(ProcessKind::kExec, request));
  if (!execution.ok()) {
    Abort(execution.status());
    return;
  }
  Begin(*std::move(execution), KeepaliveInterval(request));
}

// ----------------------------------------------------------------------------------- ExecInteractiveReactor

ExecInteractiveReactor::ExecInteractiveReactor(SandboxManager* sandboxes, ExecManager* execs,
                                               const CallAuthenticator* auth, Clock* clock,
                                               grpc::CallbackServerContext* ctx)
    : ExecStreamReactor(clock), sandboxes_(sandboxes), execs_(execs), auth_(auth), ctx_(ctx) {
  StartRead(&input_);
}

void ExecInteractiveReactor::ReadNext() {
  absl::MutexLock lock(&state_->mu);
  ReadNextLocked();
}

void ExecInteractiveReactor::ReadNextLocked() {
  if (!finished_) StartRead(&input_);
}

void ExecInteractiveReactor::Start() {
  if (input_.has_attach()) return Attach();
  if (!input_.has_start()) return Abort(absl::InvalidArgumentError("the first message must be `start` or `attach`"));
  const v1::ExecRequest& request = input_.start();
  auto execution = StartCommand(*sandboxes_, *execs_, *auth_, *ctx_, request.sandbox_id(), request.command(),
                                StreamOptions(ProcessKind::kInteractive, request));
  if (!execution.ok()) return Abort(execution.status());
  started_ = true;
  Begin(*std::move(execution), KeepaliveInterval(request));
  ReadNext();
}

void ExecInteractiveReactor::Attach() {
  const v1::AttachProcess& attach = input_.attach();
  auto sandbox = OpenSandbox(*auth_, *sandboxes_, *ctx_, attach.sandbox_id());
  if (!sandbox.ok()) return Abort(sandbox.status());
  auto execution = execs_->TakeUp(attach.sandbox_id(), attach.process_id());
  if (!execution.ok()) return Abort(execution.status());
  started_ = true;
  const absl::Duration keepalive =
      attach.has_keepalive_interval() && FromProto(attach.keepalive_interval()) >= absl::Milliseconds(100)
          ? FromProto(attach.keepalive_interval())
          : absl::Seconds(10);
  Begin(*std::move(execution), keepalive);
  ReadNext();
}

void ExecInteractiveReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed (or the call ended): EOF on stdin; output keeps streaming.
    if (started_) {
      execution_->CloseStdin();
    } else {
      Abort(absl::InvalidArgumentError("the stream ended before its `start` message"));
    }
    return;
  }
  if (!started_) return Start();
  switch (input_.input_case()) {
    case v1::ExecInput::kStdin: {
      std::weak_ptr<State> weak = state_;
      // Flow control: the next message is read once this chunk is in the pipe.
      execution_->SendStdin(std::move(*input_.mutable_stdin()), [weak] {
        if (auto state = weak.lock()) {
          absl::MutexLock l(&state->mu);
          if (state->reactor != nullptr) static_cast<ExecInteractiveReactor*>(state->reactor)->ReadNextLocked();
        }
      });
      return;
    }
    case v1::ExecInput::kCloseStdin: execution_->CloseStdin(); return ReadNext();
    case v1::ExecInput::kSignal:
      if (input_.signal() < 1 || input_.signal() > 64) {
        return Abort(absl::InvalidArgumentError(absl::StrCat("signal ", input_.signal(), " is not 1-64")));
      }
      execution_->Signal(input_.signal());
      return ReadNext();
    case v1::ExecInput::kStart: return Abort(absl::InvalidArgumentError("`start` may be sent only once"));
    case v1::ExecInput::kAttach: return Abort(absl::InvalidArgumentError("`attach` comes first, and once"));
    case v1::ExecInput::INPUT_NOT_SET: return Abort(absl::InvalidArgumentError("an empty ExecInput message"));
  }
}

}  // namespace corral::sandbox
