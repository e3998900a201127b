// corral-bench-sandbox: drives corral-sandbox-host through its gRPC API, and times the peers (raw posix_spawn
// of `true`, bubblewrap) with the same clock, so bench/sandbox_host/run.sh can print them side by side.
//   --mode=lifecycle --n=1000   create n sandboxes, exec `true` in each, delete each; prints per-phase seconds
//   --mode=exec --n=500         exec `true` n times in one warm sandbox; prints p50/p99 ms
//   --mode=spawn --n=500        posix_spawn /bin/true n times; prints p50/p99 ms
//   --mode=bwrap --n=500        posix_spawn bwrap (isolation comparable to a sandbox) n times; p50/p99 ms
//   --mode=first-command --n=100 --pattern=sequential|staggered|burst
//                               create-to-first-command latency as the public sandbox leaderboards measure it: a
//                               create then a first command (`echo ready`), timed per sandbox (median, p95, p99);
//                               one at a time, one started every --stagger-ms (default 100), or all n at once
//   --mode=fork --home-mib=100  ForkSandbox of 1, 8 and 64 children from a sandbox with a home of that size, against
//                               creating as many fresh sandboxes and against copying the home as many times (cp -a;
//                               --no-copy leaves the copies out); prints milliseconds per count
//   --mode=fork-many --n=1000   n children of one sandbox, then waits for a line on stdin (the caller measures the
//                               host's memory and disk), then deletes them
//   --image=REF                 lifecycle, exec, first-command and fork: sandboxes made from this image on the host
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"

extern char** environ;

namespace {

struct Flags {
  std::string mode, addr, image, pattern = "sequential";
  int n = 500;
  int threads = 8;
  int stagger_ms = 100;
  int home_mib = 100;
  bool copy = true;  // fork mode: also time copying the home (off for homes too large to copy 64 times)
};

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

void PrintLatency(const std::vector<double>& ms, int errors) {
  std::printf("n=%zu p50_ms=%.3f p99_ms=%.3f errors=%d\n", ms.size(), Pct(ms, 0.5), Pct(ms, 0.99), errors);
}

bool ExecTrue(corral::v1::SandboxHost::Stub& stub, const std::string& id,
              const std::vector<std::string>& argv = {"true"}) {
  grpc::ClientContext ctx;
  corral::SetDeadline(ctx, absl::Seconds(30));
  corral::v1::ExecRequest req;
  req.set_sandbox_id(id);
  for (const auto& a : argv) req.mutable_command()->add_argv(a);
  auto reader = stub.Exec(&ctx, req);
  corral::v1::ExecEvent ev;
  int code = -1;
  while (reader->Read(&ev)) {
    if (ev.has_exited()) code = ev.exited().exit_code();
  }
  return reader->Finish().ok() && code == 0;
}

double SpawnMs(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const absl::Time start = absl::Now();
  pid_t pid;
  if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? absl::ToDoubleMilliseconds(absl::Now() - start) : -1;
}

int RunSpawn(const Flags& f, const std::vector<std::string>& argv) {
  std::vector<double> ms;
  int errors = 0;
  for (int i = 0; i < f.n; ++i) {
    double t = SpawnMs(argv);
    if (t < 0) {
      ++errors;
    } else {
      ms.push_back(t);
    }
  }
  PrintLatency(ms, errors);
  return errors == 0 ? 0 : 1;
}

// One sample of create-to-first-command: CreateSandboxes (one), then Exec `echo ready` to its exit; the sandbox is
// deleted afterwards, untimed. Milliseconds, or -1 on an error.
double FirstCommandMs(corral::v1::SandboxHost::Stub& stub, const std::string& image) {
  const absl::Time start = absl::Now();
  grpc::ClientContext ctx;
  corral::SetDeadline(ctx, absl::Seconds(120));
  corral::v1::CreateSandboxesRequest req;
  req.set_count(1);
  req.mutable_spec()->set_image(image);
  corral::v1::CreateSandboxesResponse resp;
  if (!stub.CreateSandboxes(&ctx, req, &resp).ok() || resp.sandboxes_size() != 1) return -1;
  const std::string id = resp.sandboxes(0).sandbox().sandbox_id();
  const bool ran = ExecTrue(stub, id, {"echo", "ready"});
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  grpc::ClientContext del_ctx;
  corral::SetDeadline(del_ctx, absl::Seconds(60));
  corral::v1::DeleteSandboxRequest del;
  del.set_sandbox_id(id);
  corral::v1::DeleteSandboxResponse deleted;
  const bool gone = stub.DeleteSandbox(&del_ctx, del, &deleted).ok();
  return ran && gone ? ms : -1;
}

using Created = corral::v1::CreateSandboxesResponse;

std::optional<Created> CreateMany(corral::v1::SandboxHost::Stub& stub, int count, const std::string& image = "") {
  grpc::ClientContext ctx;
  corral::SetDeadline(ctx, absl::Seconds(300));
  corral::v1::CreateSandboxesRequest req;
  req.set_count(static_cast<uint32_t>(count));
  req.mutable_spec()->set_image(image);
  Created resp;
  if (!stub.CreateSandboxes(&ctx, req, &resp).ok() || resp.sandboxes_size() != count) return std::nullopt;
  return resp;
}

std::optional<Created> ForkMany(corral::v1::SandboxHost::Stub& stub, const std::string& id, int count) {
  grpc::ClientContext ctx;
  corral::SetDeadline(ctx, absl::Seconds(300));
  corral::v1::ForkSandboxRequest req;
  req.set_sandbox_id(id);
  req.set_count(static_cast<uint32_t>(count));
  Created resp;
  grpc::Status s = stub.ForkSandbox(&ctx, req, &resp);
  if (!s.ok()) std::cerr << "ForkSandbox: " << s.error_message() << "\n";
  if (!s.ok() || resp.sandboxes_size() != count) return std::nullopt;
  return resp;
}

void DeleteAll(corral::v1::SandboxHost::Stub& stub, const Created& created) {
  for (const auto& c : created.sandboxes()) {
    grpc::ClientContext ctx;
    corral::SetDeadline(ctx, absl::Seconds(60));
    corral::v1::DeleteSandboxRequest req;
    req.set_sandbox_id(c.sandbox().sandbox_id());
    corral::v1::DeleteSandboxResponse resp;
    (void)stub.DeleteSandbox(&ctx, req, &resp);
  }
}

// A sandbox whose home (in an image sandbox: its working directory, in its upper layer) holds `mib` MiB (one
// random file), or nullopt.
std::optional<Created> SandboxWithHome(corral::v1::SandboxHost::Stub& stub, int mib, const std::string& image) {
  auto made = CreateMany(stub, 1, image);
  if (!made) return std::nullopt;
  const std::string fill = absl::StrCat("head -c ", mib, "M /dev/urandom > data");
  if (!ExecTrue(stub, made->sandboxes(0).sandbox().sandbox_id(), {"sh", "-c", fill})) return std::nullopt;
  return made;
}

double Ms(absl::Time since) { return absl::ToDoubleMilliseconds(absl::Now() - since); }

int RunFork(const Flags& f, corral::v1::SandboxHost::Stub& stub) {
  int errors = 0;
  for (int k : {1, 8, 64}) {
    // Each count on a parent of its own, so every fork freezes a home (the first fork's whole cost).
    auto parent = SandboxWithHome(stub, f.home_mib, f.image);
    if (!parent) return 1;
    const std::string home = parent->sandboxes(0).sandbox().home();
    // Copying the home k times, as a snapshot without layers would (each copy removed before the next); before
    // the fork, which moves the home's files into a layer. (An image sandbox's upper layer is a tmpfs no host
    // path reaches: no copy is timed.)
    double copy_ms = 0;
    for (int i = 0; i < k && f.image.empty() && f.copy; ++i) {
      const std::string dest = absl::StrCat(home, ".copy");
      const std::string cp = absl::StrCat("cp -a --reflink=never ", home, " ", dest);
      const absl::Time c = absl::Now();
      if (std::system(cp.c_str()) != 0) ++errors;
      copy_ms += Ms(c);
      (void)std::system(absl::StrCat("rm -rf ", dest).c_str());
    }
    // Right after the exec that filled the home, as a caller would: an ended exec lets go of the sandbox at once.
    absl::Time t = absl::Now();
    auto forked = ForkMany(stub, parent->sandboxes(0).sandbox().sandbox_id(), k);
    const double fork_ms = Ms(t);
    if (!forked) ++errors;
    // The first command in a child: the fork's promise is a usable sandbox that has the parent's files.
    t = absl::Now();
    const bool ran = forked && ExecTrue(stub, forked->sandboxes(0).sandbox().sandbox_id(),
                                        {"test", f.home_mib > 0 ? "-s" : "-e", "data"});
    const double first_ms = Ms(t);
    if (!ran) ++errors;
    if (forked) DeleteAll(stub, *forked);
    t = absl::Now();
    auto fresh = CreateMany(stub, k, f.image);
    const double create_ms = Ms(t);
    if (!fresh) ++errors;
    if (fresh) DeleteAll(stub, *fresh);
    DeleteAll(stub, *parent);
    std::printf("children=%d fork_ms=%.1f first_command_ms=%.1f create_ms=%.1f copy_ms=%.1f\n", k, fork_ms, first_ms,
                create_ms, copy_ms);
  }
  std::printf("errors=%d\n", errors);
  return errors == 0 ? 0 : 1;
}

int RunForkMany(const Flags& f, corral::v1::SandboxHost::Stub& stub) {
  auto parent = SandboxWithHome(stub, f.home_mib, f.image);
  if (!parent) return 1;
  absl::SleepFor(absl::Milliseconds(300));  // an idle parent (see RunFork)
  const absl::Time t = absl::Now();
  auto forked = ForkMany(stub, parent->sandboxes(0).sandbox().sandbox_id(), f.n);
  if (!forked) return 1;
  std::printf("forked=%d fork_ms=%.1f\n", f.n, Ms(t));
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);  // the caller measures the host now
  DeleteAll(stub, *forked);
  DeleteAll(stub, *parent);
  return 0;
}

int RunFirstCommand(const Flags& f, corral::v1::SandboxHost::Stub& stub) {
  std::vector<double> ms(static_cast<size_t>(f.n), -1);
  if (f.pattern == "sequential") {
    for (int i = 0; i < f.n; ++i) ms[static_cast<size_t>(i)] = FirstCommandMs(stub, f.image);
  } else if (f.pattern == "staggered" || f.pattern == "burst") {
    // Each sample on its own thread: staggered starts one every stagger_ms, burst starts them all at once.
    std::vector<std::thread> ts;
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < f.n; ++i) {
      if (f.pattern == "staggered") absl::SleepFor(t0 + absl::Milliseconds(i * f.stagger_ms) - absl::Now());
      ts.emplace_back([&, i] { ms[static_cast<size_t>(i)] = FirstCommandMs(stub, f.image); });
    }
    for (auto& t : ts) t.join();
  } else {
    std::cerr << "unknown --pattern (sequential, staggered, burst)\n";
    return 2;
  }
  std::vector<double> ok;
  for (double m : ms) {
    if (m >= 0) ok.push_back(m);
  }
  const int errors = f.n - static_cast<int>(ok.size());
  std::printf("n=%zu p50_ms=%.1f p95_ms=%.1f p99_ms=%.1f errors=%d\n", ok.size(), Pct(ok, 0.5), Pct(ok, 0.95),
              Pct(ok, 0.99), errors);
  return errors == 0 ? 0 : 1;
}

}  // namespace

// The flags into `f`; -1 to go on, else the exit code (a --help, or a flag it does not know).
int ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--mode=", 0) == 0)
      f->mode = a.substr(7);
    else if (a.rfind("--addr=", 0) == 0)
      f->addr = a.substr(7);
    else if (a.rfind("--n=", 0) == 0)
      f->n = std::stoi(a.substr(4));
    else if (a.rfind("--threads=", 0) == 0)
      f->threads = std::stoi(a.substr(10));
    else if (a.rfind("--image=", 0) == 0)
      f->image = a.substr(8);
    else if (a.rfind("--pattern=", 0) == 0)
      f->pattern = a.substr(10);
    else if (a.rfind("--stagger-ms=", 0) == 0)
      f->stagger_ms = std::stoi(a.substr(13));
    else if (a.rfind("--home-mib=", 0) == 0)
      f->home_mib = std::stoi(a.substr(11));
    else if (a == "--no-copy")
      f->copy = false;
    else {
      std::cerr << "usage: corral-bench-sandbox --mode=lifecycle|exec|first-command|spawn|bwrap [--addr=HOST:PORT] "
                   "[--n=N] [--image=REF] [--pattern=sequential|staggered|burst] [--stagger-ms=MS] [--home-mib=MIB] "
                   "[--no-copy]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  return -1;
}

// exec: one sandbox, `n` execs of /bin/true in it one after another.
int RunExec(const Flags& f, corral::v1::SandboxHost::Stub& stub) {
  grpc::ClientContext ctx;
  corral::SetDeadline(ctx, absl::Seconds(60));
  corral::v1::CreateSandboxesRequest req;
  req.set_count(1);
  req.mutable_spec()->set_image(f.image);
  corral::v1::CreateSandboxesResponse resp;
  if (!stub.CreateSandboxes(&ctx, req, &resp).ok() || resp.sandboxes_size() != 1) return 1;
  const std::string id = resp.sandboxes(0).sandbox().sandbox_id();
  std::vector<double> ms;
  int errors = 0;
  for (int i = 0; i < f.n; ++i) {
    const absl::Time start = absl::Now();
    if (ExecTrue(stub, id)) {
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    } else {
      ++errors;
    }
  }
  PrintLatency(ms, errors);
  return errors == 0 ? 0 : 1;
}

// lifecycle: `n` sandboxes created (in batches of 50 from the worker threads, as a scheduler would), one exec
// in each, all deleted; the host's RSS read by the caller between creation and the execs.
int RunLifecycle(const Flags& f, corral::v1::SandboxHost::Stub& stub) {
  // Phase 1: create n (batches of 50 from the worker threads, as a scheduler would).
  std::vector<std::string> ids;
  std::mutex ids_mu;
  std::atomic<int> next = 0, errors = 0;
  auto parallel = [&](auto body) {
    std::vector<std::thread> ts;
    for (int t = 0; t < f.threads; ++t) ts.emplace_back(body);
    for (auto& t : ts) t.join();
  };
  const absl::Time t0 = absl::Now();
  parallel([&] {
    while (true) {
      int start = next.fetch_add(50);
      if (start >= f.n) return;
      grpc::ClientContext ctx;
      corral::SetDeadline(ctx, absl::Seconds(120));
      corral::v1::CreateSandboxesRequest req;
      req.set_count(static_cast<uint32_t>(std::min(50, f.n - start)));
      req.mutable_spec()->set_image(f.image);
      corral::v1::CreateSandboxesResponse resp;
      if (!stub.CreateSandboxes(&ctx, req, &resp).ok()) {
        ++errors;
        continue;
      }
      std::lock_guard<std::mutex> lock(ids_mu);
      for (const auto& c : resp.sandboxes()) ids.push_back(c.sandbox().sandbox_id());
    }
  });
  const absl::Time t1 = absl::Now();
  std::printf("created=%zu\n", ids.size());
  std::fflush(stdout);
  // The caller reads the host's RSS now (it waits for a line on stdin).
  std::string line;
  std::getline(std::cin, line);
  const absl::Time t1b = absl::Now();
  next = 0;
  parallel([&] {
    for (int i; (i = next.fetch_add(1)) < static_cast<int>(ids.size());) {
      if (!ExecTrue(stub, ids[static_cast<size_t>(i)])) ++errors;
    }
  });
  const absl::Time t2 = absl::Now();
  next = 0;
  parallel([&] {
    for (int i; (i = next.fetch_add(1)) < static_cast<int>(ids.size());) {
      grpc::ClientContext ctx;
      corral::SetDeadline(ctx, absl::Seconds(60));
      corral::v1::DeleteSandboxRequest req;
      req.set_sandbox_id(ids[static_cast<size_t>(i)]);
      corral::v1::DeleteSandboxResponse resp;
      if (!stub.DeleteSandbox(&ctx, req, &resp).ok()) ++errors;
    }
  });
  const absl::Time t3 = absl::Now();
  const double create_s = absl::ToDoubleSeconds(t1 - t0), exec_s = absl::ToDoubleSeconds(t2 - t1b),
               delete_s = absl::ToDoubleSeconds(t3 - t2);
  std::printf("sandboxes=%zu create_s=%.3f exec_s=%.3f delete_s=%.3f total_s=%.3f errors=%d\n", ids.size(), create_s,
              exec_s, delete_s, create_s + exec_s + delete_s, errors.load());
  return errors == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  Flags f;
  if (const int exit = ParseFlags(argc, argv, &f); exit >= 0) return exit;
  if (f.mode == "spawn") return RunSpawn(f, {"/bin/true"});
  if (f.mode == "bwrap") {
    // Comparable isolation: new user/pid/net/ipc/uts/mount namespaces, read-only system dirs, private /tmp.
    return RunSpawn(f, {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent",
                        "--ro-bind",      "/usr",          "/usr",
                        "--symlink",      "usr/bin",       "/bin",
                        "--symlink",      "usr/lib",       "/lib",
                        "--symlink",      "usr/lib64",     "/lib64",
                        "--proc",         "/proc",         "--dev",
                        "/dev",           "--tmpfs",       "/tmp",
                        "/bin/true"});
  }
  auto stub = corral::v1::SandboxHost::NewStub(*corral::MakeChannel(f.addr));
  if (f.mode == "first-command") return RunFirstCommand(f, *stub);
  if (f.mode == "fork") return RunFork(f, *stub);
  if (f.mode == "fork-many") return RunForkMany(f, *stub);
  if (f.mode == "exec") return RunExec(f, *stub);
  if (f.mode == "lifecycle") return RunLifecycle(f, *stub);
  std::cerr << "unknown mode\n";
  return 2;
}
