// corral policy update|pause|resume: asynchronous RL from the shell (the scheduler's UpdatePolicy,
// PauseGeneration, ResumeGeneration) — e.g. around a manual weight swap on the inference servers.
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_format.h"
#include "corral/v1/scheduler.grpc.pb.h"
#include "libs/api/proto_time.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/output.h"
#include "tools/corral/scheduler_client.h"

namespace corral::cli {

void RegisterPolicy(CLI::App& app, int& exit_code) {
  struct Flags {
    ConnectFlags conn;
    int64_t version = -1;
    std::string mode = "abort";
    double abort_after_s = -1;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* policy = app.add_subcommand("policy", "asynchronous RL: the policy version and generation pauses");
  policy->require_subcommand(1);
  AddConnectFlags(policy, f->conn, "scheduler", "--scheduler", "scheduler");

  // Runs `call` on the scheduler; prints `Fail` on error.
  auto with_scheduler = [f, &exit_code](const char* what, auto call) {
    auto s = ConnectScheduler(f->conn);
    if (!s.ok()) {
      exit_code = Fail(what, s.status());
      return;
    }
    grpc::ClientContext ctx;
    AttachBearer(ctx, s->token);
    if (grpc::Status st = call(*s->stub, ctx); !st.ok()) exit_code = Fail(what, FromGrpcStatus(st));
  };

  CLI::App* update = policy->add_subcommand("update", "the inference servers now serve policy VERSION");
  update->add_option("version", f->version, "the new version (>= the current one)")->required();
  update->callback([f, with_scheduler] {
    with_scheduler("policy update", [&](v1::Scheduler::Stub& stub, grpc::ClientContext& ctx) {
      v1::UpdatePolicyRequest req;
      req.set_version(f->version);
      v1::UpdatePolicyResponse resp;
      grpc::Status st = stub.UpdatePolicy(&ctx, req, &resp);
      if (st.ok()) {
        std::cout << absl::StrFormat("policy version %d -> %d on %d proxy replica(s)\n", resp.previous_version(),
                                     resp.version(), resp.replicas());
      }
      return st;
    });
  });

  CLI::App* pause = policy->add_subcommand("pause", "stop sending calls upstream; returns once none is in flight");
  pause
      ->add_option("--mode", f->mode,
                   "abort: cut the calls in flight, continued after the resume; drain: let them finish")
      ->check(CLI::IsMember({"abort", "drain"}));
  pause->add_option("--abort-after", f->abort_after_s, "drain: seconds after which what is still in flight is cut");
  pause->callback([f, with_scheduler] {
    with_scheduler("policy pause", [&](v1::Scheduler::Stub& stub, grpc::ClientContext& ctx) {
      v1::PauseGenerationRequest req;
      req.set_mode(f->mode == "drain" ? v1::PAUSE_MODE_DRAIN : v1::PAUSE_MODE_ABORT);
      if (f->abort_after_s >= 0) ToProto(absl::Seconds(f->abort_after_s), req.mutable_abort_after());
      v1::PauseGenerationResponse resp;
      grpc::Status st = stub.PauseGeneration(&ctx, req, &resp);
      if (st.ok()) {
        std::cout << absl::StrFormat("paused on %d proxy replica(s) after %s: %d drained, %d aborted, %d held\n",
                                     resp.replicas(), absl::FormatDuration(FromProto(resp.waited())), resp.drained(),
                                     resp.aborted(), resp.held());
      }
      return st;
    });
  });

  CLI::App* resume = policy->add_subcommand("resume", "end the pause (at --version when given)");
  resume->add_option("--version", f->version, "the policy version the inference servers serve now");
  resume->callback([f, with_scheduler] {
    with_scheduler("policy resume", [&](v1::Scheduler::Stub& stub, grpc::ClientContext& ctx) {
      v1::ResumeGenerationRequest req;
      if (f->version >= 0) req.set_version(f->version);
      v1::ResumeGenerationResponse resp;
      grpc::Status st = stub.ResumeGeneration(&ctx, req, &resp);
      if (st.ok()) {
        std::cout << absl::StrFormat(
            "resumed at version %d on %d proxy replica(s) after a pause of %s: %d call(s) released\n", resp.version(),
            resp.replicas(), absl::FormatDuration(FromProto(resp.paused_for())), resp.released());
      }
      return st;
    });
  });
}

}  // namespace corral::cli
