// `corral session open|close|ls` and `corral trajectory show`: manage corral-proxy sessions from the shell.
#include <iostream>

#include "absl/strings/str_format.h"
#include "corral/v1/proxy.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/output.h"

namespace corral::cli {
namespace {

// Runs one unary call on the proxy; prints the error and returns 1 when it fails.
template <class Req, class Resp, class Method>
int Call(const ConnectFlags& flags, const std::string& what, Method method, const Req& req, Resp* resp) {
  auto token = flags.BearerToken();
  if (!token.ok()) return Fail(what, token.status());
  auto channel = MakeChannel(flags.address, flags.Channel());
  if (!channel.ok()) return Fail(what, channel.status());
  auto stub = v1::Proxy::NewStub(*channel);
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(flags.timeout_s));
  AttachBearer(ctx, *token);
  grpc::Status s = ((*stub).*method)(&ctx, req, resp);
  if (!s.ok()) return Fail(what, FromGrpcStatus(s));
  return 0;
}

void PrintJson(const google::protobuf::Message& m) { std::cout << ToJson(m, /*pretty=*/true); }

v1::TrajectoryFormat Format(const std::string& name) {
  return name == "calls" ? v1::TRAJECTORY_FORMAT_CALLS : v1::TRAJECTORY_FORMAT_TRAJECTORY;
}

}  // namespace

void RegisterSession(CLI::App& app, int& exit_code) {
  CLI::App* session = app.add_subcommand("session", "open, close and list corral-proxy sessions");
  session->require_subcommand(1);

  struct OpenFlags {
    ConnectFlags conn;
    std::string env_id;
    bool capture_token_ids = false, capture_logprobs = false;
    uint32_t max_calls = 0;
    int max_tokens = 0;
    std::vector<std::string> models;
    std::string alias_all;
  };
  auto open = std::make_shared<OpenFlags>();
  CLI::App* o = session->add_subcommand("open", "open a session; prints its env token (and base URL on stderr)");
  AddConnectFlags(o, open->conn, "proxy", "--proxy");
  o->add_option("--env-id", open->env_id, "the session's id, unique per episode attempt")->required();
  o->add_flag("--capture-token-ids", open->capture_token_ids, "record prompt and completion token ids");
  o->add_flag("--capture-logprobs", open->capture_logprobs, "record completion logprobs");
  o->add_option("--max-calls", open->max_calls, "budget: LLM calls (0: unlimited)");
  o->add_option("--max-tokens", open->max_tokens, "cap on each call's max_tokens (0: none)");
  o->add_option("--model", open->models, "a model the session may use (repeatable; none: any)");
  o->add_option("--alias-all", open->alias_all, "send every requested model name as this model");
  o->callback([open, &exit_code] {
    v1::OpenSessionRequest req;
    req.set_env_id(open->env_id);
    v1::SessionPolicy* p = req.mutable_policy();
    p->set_capture_token_ids(open->capture_token_ids);
    p->set_capture_logprobs(open->capture_logprobs);
    p->mutable_budget()->set_max_calls(open->max_calls);
    if (open->max_tokens > 0) p->mutable_sampling_caps()->set_max_tokens(open->max_tokens);
    for (const auto& m : open->models) p->add_allowed_models(m);
    if (!open->alias_all.empty()) (*p->mutable_model_aliases())["*"] = open->alias_all;
    v1::OpenSessionResponse resp;
    exit_code = Call(open->conn, "session open", &v1::Proxy::Stub::OpenSession, req, &resp);
    if (exit_code == 0) {
      std::cout << resp.env_token() << "\n";
      std::cerr << "base URL: " << resp.base_url() << "\n";
    }
  });

  struct CloseFlags {
    ConnectFlags conn;
    std::string env_id, format = "trajectory";
  };
  auto close = std::make_shared<CloseFlags>();
  CLI::App* c = session->add_subcommand("close", "close a session; prints its trajectory (JSON)");
  AddConnectFlags(c, close->conn, "proxy", "--proxy");
  c->add_option("env_id", close->env_id, "the session's env id")->required();
  c->add_option("--format", close->format, "trajectory (per-branch conversations) or calls (the store)")
      ->check(CLI::IsMember({"trajectory", "calls"}));
  c->callback([close, &exit_code] {
    v1::CloseSessionRequest req;
    req.set_env_id(close->env_id);
    req.set_format(Format(close->format));
    v1::CloseSessionResponse resp;
    exit_code = Call(close->conn, "session close", &v1::Proxy::Stub::CloseSession, req, &resp);
    if (exit_code == 0) PrintJson(resp.trajectory());
  });

  auto ls = std::make_shared<ConnectFlags>();
  CLI::App* l = session->add_subcommand("ls", "list sessions (open, and closed but not acknowledged)");
  AddConnectFlags(l, *ls, "proxy", "--proxy");
  l->callback([ls, &exit_code] {
    v1::ListSessionsRequest req;
    req.set_page_size(1000);
    v1::ListSessionsResponse resp;
    exit_code = Call(*ls, "session ls", &v1::Proxy::Stub::ListSessions, req, &resp);
    if (exit_code != 0) return;
    std::cout << absl::StrFormat("%-32s %-7s %6s %8s %10s  %s\n", "ENV_ID", "STATE", "CALLS", "INFLIGHT", "TOKENS",
                                 "UPSTREAM");
    for (const auto& s : resp.sessions()) {
      std::cout << absl::StrFormat("%-32s %-7s %6d %8d %10d  %s\n", s.env_id(),
                                   s.state() == v1::SESSION_STATE_OPEN ? "open" : "closed", s.calls(),
                                   s.inflight_calls(), s.usage().total_tokens(), s.upstream());
    }
  });

  CLI::App* trajectory = app.add_subcommand("trajectory", "show a session's recorded trajectory");
  trajectory->require_subcommand(1);
  auto show = std::make_shared<CloseFlags>();
  CLI::App* sh = trajectory->add_subcommand("show", "print a session's trajectory so far (JSON)");
  AddConnectFlags(sh, show->conn, "proxy", "--proxy");
  sh->add_option("env_id", show->env_id, "the session's env id")->required();
  sh->add_option("--format", show->format, "trajectory or calls")->check(CLI::IsMember({"trajectory", "calls"}));
  sh->callback([show, &exit_code] {
    v1::GetTrajectoryRequest req;
    req.set_env_id(show->env_id);
    req.set_format(Format(show->format));
    v1::Trajectory resp;
    exit_code = Call(show->conn, "trajectory show", &v1::Proxy::Stub::GetTrajectory, req, &resp);
    if (exit_code == 0) PrintJson(resp);
  });
}

}  // namespace corral::cli
