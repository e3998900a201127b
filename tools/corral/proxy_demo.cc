// `corral up --demo`, the episode part: a session on the proxy, a tiny tool-using agent (Python, standard
// library only, speaking OpenAI's HTTP API like any agent would) that runs inside a sandbox whose network
// reaches only the proxy — or as a local process when there is no sandbox host — and the trajectory the proxy
// recorded for it.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "corral/v1/proxy.grpc.pb.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "libs/rpc/supervise.h"
#include "tools/corral/demo.h"

namespace corral::cli {
namespace {

// Two turns: the model asks for a tool, the agent runs it and sends the result back, the model answers.
constexpr char kAgent[] = R"py(
import json, os, subprocess, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
def chat(messages, tools):
    req = urllib.request.Request(base + "/chat/completions", method="POST",
        data=json.dumps({"model": "any", "messages": messages, "tools": tools}).encode(),
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]
tools = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
messages = [{"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "how many files are in your home?"}]
reply = chat(messages, tools)
call = reply["tool_calls"][0]
out = subprocess.run(["sh", "-c", "ls -A | wc -l"], capture_output=True, text=True).stdout.strip()
print("agent: model called", call["function"]["name"], call["function"]["arguments"], "-> tool says", out)
messages += [reply, {"role": "tool", "tool_call_id": call["id"], "content": out}]
print("agent: model answers:", chat(messages, tools)["content"])
)py";

std::string Quote(const std::string& s) { return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'"; }

// Runs the agent in a fresh sandbox limited to the proxy's port. Returns its output and exit code.
std::pair<std::string, int> RunInSandbox(const std::string& host, const std::string& token, uint16_t proxy_port,
                                         const std::string& script) {
  auto stub = v1::SandboxHost::NewStub(*MakeChannel(host));
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(60));
  AttachBearer(ctx, token);
  v1::CreateSandboxesRequest req;
  req.mutable_spec()->set_network_policy(v1::NETWORK_POLICY_PROXY_ONLY);
  req.mutable_spec()->add_allowed_ports(proxy_port);
  v1::CreateSandboxesResponse created;
  if (grpc::Status s = stub->CreateSandboxes(&ctx, req, &created); !s.ok() || created.sandboxes_size() != 1) {
    return {"cannot create a sandbox: " + FromGrpcStatus(s).ToString(), 1};
  }
  const std::string id = created.sandboxes(0).sandbox().sandbox_id();
  std::cout << "  the agent runs in sandbox " << id << " (network: the proxy's port " << proxy_port << " only)\n";
  grpc::ClientContext exec_ctx;
  SetDeadline(exec_ctx, absl::Seconds(60));
  AttachBearer(exec_ctx, token);
  v1::ExecRequest exec;
  exec.set_sandbox_id(id);
  for (const char* a : {"/bin/sh", "-c"}) exec.mutable_command()->add_argv(a);
  exec.mutable_command()->add_argv(script);
  auto reader = stub->Exec(&exec_ctx, exec);
  std::string out;
  int code = -1;
  v1::ExecEvent ev;
  while (reader->Read(&ev)) {
    out += ev.stdout() + ev.stderr();
    if (ev.has_exited()) code = ev.exited().exit_code();
  }
  (void)reader->Finish();
  grpc::ClientContext del_ctx;
  AttachBearer(del_ctx, token);
  v1::DeleteSandboxRequest del;
  del.set_sandbox_id(id);
  v1::DeleteSandboxResponse gone;
  (void)stub->DeleteSandbox(&del_ctx, del, &gone);
  return {out, code};
}

}  // namespace

int RunProxyDemo(const std::string& proxy_grpc, const std::string& proxy_http, const std::string& sandbox_host,
                 const std::string& token, const std::string& work_dir) {
  std::cout << "\ndemo: one episode through the proxy — an agent calls the model, runs a tool, answers\n";
  auto stub = v1::Proxy::NewStub(*MakeChannel(proxy_grpc));
  grpc::ClientContext ctx;
  SetDeadline(ctx, absl::Seconds(10));
  AttachBearer(ctx, token);
  v1::OpenSessionRequest open;
  open.set_env_id(absl::StrCat("demo-", getpid()));
  open.mutable_policy()->set_capture_token_ids(true);
  open.mutable_policy()->set_capture_logprobs(true);
  v1::OpenSessionResponse session;
  if (grpc::Status s = stub->OpenSession(&ctx, open, &session); !s.ok()) {
    std::cerr << "demo: cannot open a session: " << FromGrpcStatus(s) << "\n";
    return 1;
  }
  std::cout << "  session " << open.env_id() << ": OPENAI_BASE_URL=" << session.base_url()
            << " OPENAI_API_KEY=" << session.env_token().substr(0, 24) << "…\n";
  const std::string script = absl::StrCat("OPENAI_BASE_URL=", Quote(session.base_url()), " OPENAI_API_KEY=",
                                          Quote(session.env_token()), " python3 -c ", Quote(kAgent));
  std::pair<std::string, int> agent;
  if (!sandbox_host.empty()) {
    const uint16_t port = static_cast<uint16_t>(std::stoi(proxy_http.substr(proxy_http.rfind(':') + 1)));
    agent = RunInSandbox(sandbox_host, token, port, script);
  } else {
    auto p = Subprocess::Start({"/bin/sh", "-c", script}, work_dir + "/demo-agent.log");
    agent.second = p.ok() ? p->Wait(absl::Seconds(60)).value_or(-1) : -1;
    agent.first = p.ok() ? p->Log() : std::string(p.status().message());
  }
  std::string out = agent.first;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::cout << absl::StrReplaceAll(absl::StrCat("  ", out), {{"\n", "\n  "}}) << "\n";
  grpc::ClientContext close_ctx;
  SetDeadline(close_ctx, absl::Seconds(10));
  AttachBearer(close_ctx, token);
  v1::CloseSessionRequest close;
  close.set_env_id(open.env_id());
  v1::CloseSessionResponse closed;
  if (grpc::Status s = stub->CloseSession(&close_ctx, close, &closed); !s.ok()) {
    std::cerr << "demo: cannot close the session: " << FromGrpcStatus(s) << "\n";
    return 1;
  }
  const v1::Trajectory& t = closed.trajectory();
  std::cout << absl::StrFormat("  trajectory: %d calls, %d branch(es), %d prompt + %d completion tokens\n",
                               t.call_count(), t.branches_size(), t.usage().prompt_tokens(),
                               t.usage().completion_tokens());
  if (t.branches_size() > 0) {
    for (const auto& m : t.branches(0).messages()) {
      std::string text = m.message().content();
      for (const auto& tc : m.message().tool_calls()) text += absl::StrCat("[tool call ", tc.function_name(), " ", tc.arguments(), "]");
      std::cout << absl::StrFormat("    %-9s %-9s %-44s %s\n", m.message().role(), m.generated() ? "generated" : "",
                                   text.substr(0, 44), m.token_ids().empty() ? "" : absl::StrCat(m.token_ids_size(), " token ids"));
    }
  }
  const bool ok = agent.second == 0 && t.call_count() == 2 && t.failed_call_count() == 0 && t.branches_size() == 1 &&
                  t.branches(0).messages_size() == 5;
  std::cout << (ok ? "  ok: every call recorded, with the model's own token ids\n" : "  FAILED\n");
  return ok ? 0 : 1;
}

}  // namespace corral::cli
