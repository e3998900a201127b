// `corral sandbox create|fork|exec|ls|rm|info|cp`: create and use sandboxes on a corral-sandbox-host from the shell.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "absl/strings/str_format.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "libs/api/proto_time.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/sandbox_client.h"

namespace corral::cli {
namespace {

void PrintSandboxJson(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, options);
  std::cout << json;
}

struct CreateFlags {
  int count = 1;
  std::string network;
  std::vector<uint32_t> ports;
  std::vector<std::string> task_paths;
  std::string template_key;
  std::string image;
};

int RunCreate(const ConnectFlags& cf, const CreateFlags& f) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("sandbox create", client.status());
  v1::CreateSandboxesRequest req;
  req.set_count(static_cast<uint32_t>(f.count));
  if (f.network == "open") req.mutable_spec()->set_network_policy(v1::NETWORK_POLICY_OPEN);
  if (f.network == "proxy_only") req.mutable_spec()->set_network_policy(v1::NETWORK_POLICY_PROXY_ONLY);
  if (f.network == "none") req.mutable_spec()->set_network_policy(v1::NETWORK_POLICY_NONE);
  for (uint32_t p : f.ports) req.mutable_spec()->add_allowed_ports(p);
  for (const auto& p : f.task_paths) req.mutable_spec()->add_task_paths(p);
  req.mutable_spec()->set_template_key(f.template_key);
  req.mutable_spec()->set_image(f.image);
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(std::max(cf.timeout_s, 60.0)));
  v1::CreateSandboxesResponse resp;
  grpc::Status s = client->stub->CreateSandboxes(&ctx, req, &resp);
  if (!s.ok()) return Fail("sandbox create", FromGrpcStatus(s));
  for (const auto& c : resp.sandboxes()) std::cout << c.sandbox().sandbox_id() << " " << c.capability_token() << "\n";
  if (resp.rejected() > 0) std::cerr << "rejected " << resp.rejected() << " (" << resp.rejected_reason() << ")\n";
  return resp.sandboxes().empty() ? 1 : 0;
}

struct ForkFlags {
  std::string id;
  int count = 1;
  double wait_s = 0;
};

int RunFork(const ConnectFlags& cf, const ForkFlags& f) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("sandbox fork", client.status());
  v1::ForkSandboxRequest req;
  req.set_sandbox_id(f.id);
  req.set_count(static_cast<uint32_t>(f.count));
  if (f.wait_s > 0) ToProto(absl::Seconds(f.wait_s), req.mutable_wait_timeout());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(std::max(cf.timeout_s, 60.0 + f.wait_s)));
  v1::CreateSandboxesResponse resp;
  grpc::Status s = client->stub->ForkSandbox(&ctx, req, &resp);
  if (!s.ok()) return Fail("sandbox fork", FromGrpcStatus(s));
  for (const auto& c : resp.sandboxes()) {
    std::cout << c.sandbox().sandbox_id() << " " << c.capability_token() << "\n";
    for (const auto& p : c.carried_processes()) {
      std::cerr << "carried " << p.copy_of() << " into " << c.sandbox().sandbox_id() << " as " << p.process_id()
                << "\n";
    }
  }
  for (const auto& why : resp.not_carried()) std::cerr << "not carried: " << why << "\n";
  if (resp.rejected() > 0) std::cerr << "rejected " << resp.rejected() << " (" << resp.rejected_reason() << ")\n";
  return resp.sandboxes().empty() ? 1 : 0;
}

// What `corral sandbox exec` runs.
struct ExecFlags {
  std::string id;
  double timeout_s = 0;
  std::string user;
  bool fork_ready = false;
  std::vector<std::string> argv;
};

int RunExec(const ConnectFlags& cf, const ExecFlags& flags) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("sandbox exec", client.status());
  v1::ExecRequest req;
  req.set_sandbox_id(flags.id);
  for (const auto& a : flags.argv) req.mutable_command()->add_argv(a);
  if (flags.timeout_s > 0) ToProto(absl::Seconds(flags.timeout_s), req.mutable_command()->mutable_timeout());
  req.mutable_command()->set_user(flags.user);
  req.mutable_command()->set_fork_ready(flags.fork_ready);
  grpc::ClientContext ctx;
  AttachBearer(ctx, client->token);  // no deadline: the command's own timeout bounds it
  auto reader = client->stub->Exec(&ctx, req);
  v1::ExecEvent ev;
  int code = 1;
  while (reader->Read(&ev)) {
    if (ev.has_stdout()) {
      ssize_t ignored = write(1, ev.stdout().data(), ev.stdout().size());
      (void)ignored;
    } else if (ev.has_stderr()) {
      ssize_t ignored = write(2, ev.stderr().data(), ev.stderr().size());
      (void)ignored;
    } else if (ev.has_exited()) {
      code = ev.exited().exit_code();
      if (ev.exited().timed_out()) std::cerr << "corral sandbox exec: timed out; the command was killed\n";
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail("sandbox exec", FromGrpcStatus(s));
  return code;
}

int RunList(const ConnectFlags& cf) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("sandbox ls", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(cf.timeout_s));
  v1::ListSandboxesResponse resp;
  grpc::Status s = client->stub->ListSandboxes(&ctx, v1::ListSandboxesRequest(), &resp);
  if (!s.ok()) return Fail("sandbox ls", FromGrpcStatus(s));
  std::cout << absl::StrFormat("%-22s %7s %-10s %-8s %s\n", "SANDBOX", "UID", "NETWORK", "LANDLOCK", "VIEW");
  for (const auto& sb : resp.sandboxes()) {
    const auto& p = sb.protections();
    std::cout << absl::StrFormat("%-22s %7d %-10s %-8d %s\n", sb.sandbox_id(), sb.uid(),
                                 v1::NetworkPolicy_Name(p.network_policy()).substr(15), p.landlock_abi(),
                                 p.private_filesystem_view() ? "private" : "shared");
  }
  return 0;
}

int RunRemove(const ConnectFlags& cf, const std::string& id) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("sandbox rm", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(std::max(cf.timeout_s, 30.0)));
  v1::DeleteSandboxRequest req;
  req.set_sandbox_id(id);
  v1::DeleteSandboxResponse resp;
  grpc::Status s = client->stub->DeleteSandbox(&ctx, req, &resp);
  if (!s.ok()) return Fail("sandbox rm", FromGrpcStatus(s));
  std::cout << id << (resp.existed() ? " deleted\n" : " did not exist\n");
  return 0;
}

int RunInfo(const ConnectFlags& cf, const std::string& id) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("sandbox info", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(cf.timeout_s));
  if (id.empty()) {
    v1::HostInfoResponse resp;
    grpc::Status s = client->stub->HostInfo(&ctx, v1::HostInfoRequest(), &resp);
    if (!s.ok()) return Fail("sandbox info", FromGrpcStatus(s));
    PrintSandboxJson(resp);
  } else {
    v1::GetSandboxRequest req;
    req.set_sandbox_id(id);
    v1::Sandbox resp;
    grpc::Status s = client->stub->GetSandbox(&ctx, req, &resp);
    if (!s.ok()) return Fail("sandbox info", FromGrpcStatus(s));
    PrintSandboxJson(resp);
  }
  std::cout << "\n";
  return 0;
}

// "ID:PATH" names a path in a sandbox (sandbox ids never contain ':' before their path); anything else is local.
}  // namespace

void RegisterSandbox(CLI::App& app, int& exit_code) {
  CLI::App* sandbox = app.add_subcommand("sandbox", "create and use sandboxes on a corral-sandbox-host");
  sandbox->require_subcommand(1);

  auto create_conn = std::make_shared<ConnectFlags>();
  auto create = std::make_shared<CreateFlags>();
  CLI::App* c = sandbox->add_subcommand("create", "create sandboxes; prints 'ID TOKEN' per sandbox");
  AddConnectFlags(c, *create_conn, "sandbox host", "--host");
  c->add_option("--count", create->count, "how many")->capture_default_str();
  c->add_option("--network", create->network, "open, proxy_only or none (default: the host's)")
      ->check(CLI::IsMember({"open", "proxy_only", "none"}));
  c->add_option("--port", create->ports, "proxy_only: a TCP port connect() may reach (repeatable)");
  c->add_option("--task-path", create->task_paths,
                "an absolute path bound into the home, e.g. /workspace (repeatable)");
  c->add_option("--template", create->template_key, "template key to clone the home from");
  c->add_option("--image", create->image,
                "an image on the host (corral image ls) to run the sandbox in, by name or digest");
  c->callback([create_conn, create, &exit_code] { exit_code = RunCreate(*create_conn, *create); });

  auto fork_conn = std::make_shared<ConnectFlags>();
  auto fork = std::make_shared<ForkFlags>();
  CLI::App* f = sandbox->add_subcommand(
      "fork",
      "make children of a live sandbox with its files as they are, and its fork-ready processes; 'ID TOKEN' each "
      "(the processes carried into each on stderr)");
  AddConnectFlags(f, *fork_conn, "sandbox host", "--host");
  f->add_option("id", fork->id, "the parent's id")->required();
  f->add_option("--count", fork->count, "how many children")->capture_default_str();
  f->add_option("--wait", fork->wait_s, "seconds to wait for the parent's processes to end (0: refuse at once)");
  f->callback([fork_conn, fork, &exit_code] { exit_code = RunFork(*fork_conn, *fork); });

  auto exec_conn = std::make_shared<ConnectFlags>();
  auto exec = std::make_shared<ExecFlags>();
  CLI::App* e =
      sandbox->add_subcommand("exec", "run a command in a sandbox, streaming its output; exits with its code");
  AddConnectFlags(e, *exec_conn, "sandbox host", "--host");
  e->add_option("id", exec->id, "sandbox id")->required();
  e->add_option("--timeout", exec->timeout_s, "seconds before the command is killed (0: none)");
  e->add_option("--user,-u", exec->user,
                "who runs it in an image sandbox: root, a user of its /etc/passwd, uid[:gid] (default: the image's "
                "user)");
  e->add_flag("--fork-ready", exec->fork_ready,
              "carried into the sandbox's forks with its memory (a Python program that calls corral_carry.ready())");
  e->add_option("command", exec->argv, "the command and its arguments (after --)")->required();
  e->callback([exec_conn, exec, &exit_code] { exit_code = RunExec(*exec_conn, *exec); });

  auto ls_conn = std::make_shared<ConnectFlags>();
  CLI::App* ls = sandbox->add_subcommand("ls", "list the host's sandboxes");
  AddConnectFlags(ls, *ls_conn, "sandbox host", "--host");
  ls->callback([ls_conn, &exit_code] { exit_code = RunList(*ls_conn); });

  auto rm_conn = std::make_shared<ConnectFlags>();
  auto rm_id = std::make_shared<std::string>();
  CLI::App* rm = sandbox->add_subcommand("rm", "delete a sandbox (kills its processes, wipes its home)");
  AddConnectFlags(rm, *rm_conn, "sandbox host", "--host");
  rm->add_option("id", *rm_id, "sandbox id")->required();
  rm->callback([rm_conn, rm_id, &exit_code] { exit_code = RunRemove(*rm_conn, *rm_id); });

  auto cp_conn = std::make_shared<ConnectFlags>();
  auto cp_args = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* cp = sandbox->add_subcommand(
      "cp", "copy a file or directory in or out of a sandbox, docker-cp style (ID:PATH is a sandbox path)");
  AddConnectFlags(cp, *cp_conn, "sandbox host", "--host");
  cp->add_option("src", cp_args->first, "source: a local file or directory, or ID:PATH")->required();
  cp->add_option("dst", cp_args->second, "destination: a local path, or ID:PATH")->required();
  cp->callback([cp_conn, cp_args, &exit_code] { exit_code = RunCopy(*cp_conn, cp_args->first, cp_args->second); });

  auto info_conn = std::make_shared<ConnectFlags>();
  auto info_id = std::make_shared<std::string>();
  CLI::App* info = sandbox->add_subcommand("info", "the host's capacity and features, or one sandbox (JSON)");
  AddConnectFlags(info, *info_conn, "sandbox host", "--host");
  info->add_option("id", *info_id, "sandbox id (omit for the host)");
  info->callback([info_conn, info_id, &exit_code] { exit_code = RunInfo(*info_conn, *info_id); });
}

}  // namespace corral::cli
