#include "services/sandbox_host/exec_reactor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/sandbox_path.h"
#include "services/sandbox_host/sandbox_service.h"

namespace corral::sandbox {
namespace {

constexpr absl::Duration kMaxExecTimeout = absl::Hours(24);

absl::StatusOr<ExecOptions> OptionsFrom(const Sandbox& sb, const v1::ExecRequest& r) {
  ExecOptions o;
  o.argv = {r.command().argv().begin(), r.command().argv().end()};
  if (o.argv.empty()) return absl::InvalidArgumentError("command.argv must not be empty");
  o.env = {r.command().env().begin(), r.command().env().end()};
  if (r.command().has_timeout()) {
    o.timeout = FromProto(r.command().timeout());
    if (o.timeout <= absl::ZeroDuration() || o.timeout > kMaxExecTimeout) {
      return absl::InvalidArgumentError("command.timeout must be above 0 and at most 24h");
    }
  }
  if (!r.command().cwd().empty()) {
    auto cwd = ParseSandboxPath(r.command().cwd(), sb.spec.task_paths, /*allow_home=*/true);
    if (!cwd.ok()) return cwd.status();
    auto st = StatPath(sb.home_fd.get(), *cwd);
    if (!st.ok()) return st.status();
    if (!S_ISDIR(st->st_mode)) return absl::FailedPreconditionError("command.cwd is not a directory");
    // Inside the sandbox's view a task path is bound at its absolute path; elsewhere it lives in the home.
    o.cwd = r.command().cwd()[0] == '/' && sb.protections.mount_namespace
                ? r.command().cwd()
                : absl::StrCat(sb.home, "/", absl::StrJoin(cwd->components, "/"));
  }
  o.stdin_data = r.stdin();
  o.max_output_bytes = r.max_output_bytes();
  return o;
}

}  // namespace

ExecReactor::ExecReactor(SandboxManager* sandboxes, ExecManager* execs, const CallAuthenticator* auth, Clock* clock,
                         grpc::CallbackServerContext* ctx, const v1::ExecRequest& request)
    : clock_(clock) {
  {
    absl::MutexLock lock(&state_->mu);
    state_->reactor = this;
  }
  absl::Status status = AuthorizeSandbox(*auth, *sandboxes, *ctx, request.sandbox_id());
  absl::StatusOr<std::shared_ptr<const Sandbox>> sb = status.ok() ? sandboxes->Find(request.sandbox_id())
                                                                  : absl::StatusOr<std::shared_ptr<const Sandbox>>(status);
  absl::StatusOr<ExecOptions> options = sb.ok() ? OptionsFrom(**sb, request) : absl::StatusOr<ExecOptions>(sb.status());
  absl::StatusOr<std::shared_ptr<Execution>> execution =
      options.ok() ? execs->Start(*sb, *std::move(options)) : absl::StatusOr<std::shared_ptr<Execution>>(options.status());
  if (!execution.ok()) {
    absl::MutexLock lock(&state_->mu);
    finished_ = true;
    Finish(ToGrpcStatus(execution.status()));
    return;
  }
  execution_ = *std::move(execution);
  if (request.has_keepalive_interval() && FromProto(request.keepalive_interval()) >= absl::Milliseconds(100)) {
    keepalive_interval_ = FromProto(request.keepalive_interval());
  }
  {
    absl::MutexLock lock(&state_->mu);
    event_.mutable_started()->set_pid(execution_->pid());
    event_.mutable_started()->set_process_id(absl::StrCat("p-", execution_->pid()));
    ToProto(execution_->start_time(), event_.mutable_started()->mutable_start_time());
    writing_ = true;
    StartWrite(&event_);
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

void ExecReactor::ArmKeepalive() {
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

void ExecReactor::Pump() {
  if (writing_ || finished_ || exit_sent_) return;
  std::optional<OutputEvent> ev = execution_->Next();
  if (!ev) {
    if (!keepalive_due_) return;
    keepalive_due_ = false;
    event_.Clear();
    event_.mutable_keepalive();
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
  StartWrite(&event_);
}

void ExecReactor::OnWriteDone(bool ok) {
  bool kill = false;
  {
    absl::MutexLock lock(&state_->mu);
    writing_ = false;
    if (!ok) {
      finished_ = true;
      kill = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    } else if (exit_sent_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    } else {
      Pump();
    }
  }
  if (kill) execution_->Kill(ExitReason::kCallEnded);
}

void ExecReactor::OnCancel() {
  // The call ended early (cancelled, or its deadline passed): a process never outlives its Exec.
  if (execution_) execution_->Kill(ExitReason::kCallEnded);
  absl::MutexLock lock(&state_->mu);
  if (!finished_ && !writing_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled"));
  }
}

void ExecReactor::OnDone() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->reactor = nullptr;
    clock_->Cancel(keepalive_timer_);
  }
  if (execution_) execution_->SetListener(nullptr);
  delete this;
}

}  // namespace corral::sandbox
