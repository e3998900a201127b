// corral-bench-carry: forks a sandbox whose fork-ready Python process holds --state-mib MiB, into --n children,
// through corral-sandbox-host's API, and times how long until every child's copy answers with the parent's
// state; then forks a sandbox with no process into as many children, the file fork the first is compared with.
// --mode: self (the process carries itself, corral_carry.ready()), driven (it does not: the host carries it), mcp
// (self, beside a stdio MCP server with state, which the host carries: each child's copy of the server must
// answer a call with the parent's total plus its own).
// Prints one line: carry_fork_ms (the ForkSandbox call), carry_all_ms (to every copy's answer), answer p50/p99
// (attach and one round trip per copy, 8 at a time), each copy's memory of its own (private KiB, from smaps) and
// the parent's, and file_fork_ms.
//   corral-bench-carry --addr=HOST:PORT [--n=64] [--state-mib=50] [--mode=self|driven|mcp]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"

namespace {

using corral::v1::SandboxHost;
using Created = corral::v1::CreateSandboxesResponse;

// Holds the state and answers each line with a digest of it and its pid; carries itself when argv[2] is "self".
constexpr char kHolder[] = R"(
import hashlib, os, sys
if sys.argv[2] == "self":
    import corral_carry
    corral_carry.ready()
block = os.urandom(1 << 20)
state = bytearray(block) * int(sys.argv[1])
digest = hashlib.sha256(state[::4096]).hexdigest()[:16]
os.write(1, b"ready\n")
while True:
    line = os.read(0, 4096)
    if not line: break
    os.write(1, f"{digest} {os.getpid()}\n".encode())
)";

// A stdio MCP server with state (a running total), one thread and its streams: what the host carries.
constexpr char kMcpServer[] = R"(
import json, sys
total = 0
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "tools/call":
        total += m["params"]["arguments"]["n"]
        r = {"content": [{"type": "text", "text": str(total)}]}
    else:
        r = {"tools": []}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
)";
constexpr char kMcpCall[] =
    R"({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"n": 1}}})"
    "\n";

double Ms(absl::Time since) { return absl::ToDoubleMilliseconds(absl::Now() - since); }

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

std::optional<Created> Call(SandboxHost::Stub& stub, const std::string& fork_of, int count) {
  grpc::ClientContext ctx;
  corral::SetDeadline(ctx, absl::Seconds(300));
  Created resp;
  grpc::Status s;
  if (fork_of.empty()) {
    corral::v1::CreateSandboxesRequest req;
    req.set_count(static_cast<uint32_t>(count));
    req.mutable_spec();
    s = stub.CreateSandboxes(&ctx, req, &resp);
  } else {
    corral::v1::ForkSandboxRequest req;
    req.set_sandbox_id(fork_of);
    req.set_count(static_cast<uint32_t>(count));
    s = stub.ForkSandbox(&ctx, req, &resp);
  }
  if (!s.ok()) std::cerr << "error: " << s.error_message() << "\n";
  return s.ok() ? std::optional<Created>(resp) : std::nullopt;
}

void DeleteAll(SandboxHost::Stub& stub, const Created& created) {
  for (const auto& c : created.sandboxes()) {
    grpc::ClientContext ctx;
    corral::SetDeadline(ctx, absl::Seconds(60));
    corral::v1::DeleteSandboxRequest req;
    req.set_sandbox_id(c.sandbox().sandbox_id());
    corral::v1::DeleteSandboxResponse resp;
    (void)stub.DeleteSandbox(&ctx, req, &resp);
  }
}

// An ExecInteractive stream: sends a line, reads one back.
struct Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<corral::v1::ExecInput, corral::v1::ExecEvent>> io;
  std::string buf;
  std::string process_id;

  bool Open(SandboxHost::Stub& stub, const corral::v1::ExecInput& first) {
    corral::SetDeadline(ctx, absl::Seconds(300));
    io = stub.ExecInteractive(&ctx);
    corral::v1::ExecEvent ev;
    if (!io->Write(first) || !io->Read(&ev) || !ev.has_started()) return false;
    process_id = ev.started().process_id();
    return true;
  }
  std::string Line(const std::string& send) {
    corral::v1::ExecInput in;
    in.set_stdin(send);
    if (!send.empty() && !io->Write(in)) return "";
    corral::v1::ExecEvent ev;
    while (buf.find('\n') == std::string::npos && io->Read(&ev)) buf += ev.stdout();
    const size_t end = buf.find('\n');
    if (end == std::string::npos) return "";
    std::string line = buf.substr(0, end);
    buf.erase(0, end + 1);
    return line;
  }
};

// KiB of memory only this process has (its private pages), from smaps_rollup.
long PrivateKib(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/smaps_rollup");
  std::string key;
  long kib = 0, total = 0;
  while (in >> key) {
    if ((key == "Private_Clean:" || key == "Private_Dirty:") && in >> kib) total += kib;
  }
  return total;
}

// The process id of `child`'s copy of the parent's process `of`, or "".
std::string CopyOf(const corral::v1::CreatedSandbox& child, const std::string& of) {
  for (const auto& p : child.carried_processes()) {
    if (p.copy_of() == of) return p.process_id();
  }
  return "";
}

// The parent's carried processes: the holder (its state's digest and its pid), and the MCP server's total.
struct Parent {
  std::string holder, digest, pid;
  std::string server, total;  // empty without a server
};

// Attaches to each child's copy (8 at a time) and asks it once: `ms` per copy, its pid in `copy_pids`; how many
// answered with another state, or from the parent's own pid, or whose server copy gave another total.
int AskEveryCopy(SandboxHost::Stub& stub, const Created& forked, const Parent& parent, std::vector<double>& answer_ms,
                 std::vector<std::string>& copy_pids) {
  const int n = forked.sandboxes_size();
  std::vector<std::thread> threads;
  std::mutex mu;
  int next = 0, wrong = 0;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (;;) {
        int k;
        {
          std::lock_guard<std::mutex> lock(mu);
          if ((k = next++) >= n) return;
        }
        const corral::v1::CreatedSandbox& child = forked.sandboxes(k);
        const absl::Time t = absl::Now();
        Stream copy, server;
        corral::v1::ExecInput attach;
        attach.mutable_attach()->set_sandbox_id(child.sandbox().sandbox_id());
        attach.mutable_attach()->set_process_id(CopyOf(child, parent.holder));
        const std::string got = copy.Open(stub, attach) ? copy.Line("?\n") : "";
        bool server_ok = parent.server.empty();
        if (!server_ok) {
          attach.mutable_attach()->set_process_id(CopyOf(child, parent.server));
          const std::string answer = server.Open(stub, attach) ? server.Line(kMcpCall) : "";
          server_ok =
              answer.find("\"text\": \"" + std::to_string(std::stoi(parent.total) + 1) + "\"") != std::string::npos;
          if (server.io) server.io->WritesDone();
        }
        answer_ms[static_cast<size_t>(k)] = Ms(t);
        const std::string pid = got.substr(got.find(' ') + 1);
        std::lock_guard<std::mutex> lock(mu);
        if (got.substr(0, got.find(' ')) != parent.digest || pid == parent.pid || !server_ok) {
          ++wrong;
        } else {
          copy_pids[static_cast<size_t>(k)] = pid;
        }
        if (copy.io) copy.io->WritesDone();
      }
    });
  }
  for (auto& t : threads) t.join();
  return wrong;
}

// Writes the holder into sandbox `id` and starts it fork-ready (and, for --mode=mcp, the MCP server beside it):
// what the copies must answer with, in `p`.
bool StartProcesses(SandboxHost::Stub& stub, const std::string& id, const std::string& mode, int state_mib,
                    Stream& holder, Stream& server, Parent& p) {
  {
    grpc::ClientContext ctx;
    corral::SetDeadline(ctx, absl::Seconds(30));
    corral::v1::FileInfo info;
    auto writer = stub.WriteFile(&ctx, &info);
    corral::v1::WriteFileRequest header, data;
    header.mutable_header()->set_sandbox_id(id);
    header.mutable_header()->set_path("holder.py");
    data.set_data(kHolder);
    if (!writer->Write(header) || !writer->Write(data) || !writer->WritesDone() || !writer->Finish().ok()) {
      std::cerr << "error: writing holder.py\n";
      return false;
    }
  }
  corral::v1::ExecInput start;
  start.mutable_start()->set_sandbox_id(id);
  for (const char* a : {"python3", "holder.py"}) start.mutable_start()->mutable_command()->add_argv(a);
  start.mutable_start()->mutable_command()->add_argv(std::to_string(state_mib));
  start.mutable_start()->mutable_command()->add_argv(mode == "driven" ? "driven" : "self");
  start.mutable_start()->mutable_command()->set_fork_ready(true);
  if (!holder.Open(stub, start) || holder.Line("") != "ready") {
    std::cerr << "error: the fork-ready process did not start\n";
    return false;
  }
  const std::string want = holder.Line("?\n");
  p.holder = holder.process_id;
  p.digest = want.substr(0, want.find(' '));
  p.pid = want.substr(want.find(' ') + 1);
  if (mode == "mcp") {
    start.mutable_start()->mutable_command()->clear_argv();
    for (const char* a : {"python3", "-u", "-c", kMcpServer}) start.mutable_start()->mutable_command()->add_argv(a);
    const std::string answer = server.Open(stub, start) ? server.Line(kMcpCall) : "";
    const size_t at = answer.find("\"text\": \"");
    if (at == std::string::npos) {
      std::cerr << "error: the MCP server did not answer: " << answer << "\n";
      return false;
    }
    p.server = server.process_id;
    p.total = answer.substr(at + 9, answer.find('"', at + 9) - at - 9);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string addr, mode = "self";
  int n = 64, state_mib = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--addr=", 0) == 0) {
      addr = a.substr(7);
    } else if (a.rfind("--n=", 0) == 0 && absl::SimpleAtoi(a.substr(4), &n)) {
    } else if (a.rfind("--state-mib=", 0) == 0 && absl::SimpleAtoi(a.substr(12), &state_mib)) {
    } else if (a == "--mode=self" || a == "--mode=driven" || a == "--mode=mcp") {
      mode = a.substr(7);
    } else {
      std::cerr << "usage: corral-bench-carry --addr=HOST:PORT [--n=64] [--state-mib=50] [--mode=self|driven|mcp]\n";
      return 2;
    }
  }
  auto channel = corral::MakeChannel(addr, {});
  if (!channel.ok()) {
    std::cerr << "error: " << channel.status() << "\n";
    return 1;
  }
  auto stub = SandboxHost::NewStub(*channel);
  auto parent = Call(*stub, "", 1);
  if (!parent) return 1;
  const std::string id = parent->sandboxes(0).sandbox().sandbox_id();
  Stream holder, server;
  Parent p;
  if (!StartProcesses(*stub, id, mode, state_mib, holder, server, p)) return 1;

  const absl::Time t0 = absl::Now();
  auto forked = Call(*stub, id, n);
  const double fork_ms = Ms(t0);
  if (!forked || forked->sandboxes_size() != n) {
    std::cerr << "error: the fork made " << (forked ? forked->sandboxes_size() : 0) << " children\n";
    return 1;
  }
  std::vector<double> answer_ms(static_cast<size_t>(n), -1);
  std::vector<std::string> copy_pids(static_cast<size_t>(n));
  const int wrong = AskEveryCopy(*stub, *forked, p, answer_ms, copy_pids);
  const double all_ms = Ms(t0);
  long private_sum = 0;  // read once every copy answered: walking 64 page tables is the bench's cost, not theirs
  for (const std::string& pid : copy_pids) private_sum += pid.empty() ? 0 : PrivateKib(pid);
  const long parent_kib = PrivateKib(p.pid);
  DeleteAll(*stub, *forked);
  holder.io->WritesDone();
  if (server.io) server.io->WritesDone();
  DeleteAll(*stub, *parent);

  // The file fork it is compared with: as many children of a sandbox with no process.
  auto plain = Call(*stub, "", 1);
  if (!plain) return 1;
  const absl::Time t1 = absl::Now();
  auto files = Call(*stub, plain->sandboxes(0).sandbox().sandbox_id(), n);
  const double file_ms = Ms(t1);
  if (files) DeleteAll(*stub, *files);
  DeleteAll(*stub, *plain);
  std::printf(
      "mode=%s children=%d state_mib=%d carry_fork_ms=%.1f carry_all_ms=%.1f carry_per_child_ms=%.2f "
      "answer_p50_ms=%.2f "
      "answer_p99_ms=%.2f copy_private_kib=%ld parent_private_kib=%ld file_fork_ms=%.1f wrong=%d\n",
      mode.c_str(), n, state_mib, fork_ms, all_ms, (fork_ms - file_ms) / n, Pct(answer_ms, 0.5), Pct(answer_ms, 0.99),
      private_sum / n, parent_kib, file_ms, wrong);
  return wrong == 0 && files ? 0 : 1;
}
