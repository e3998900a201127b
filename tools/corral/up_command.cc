// `corral up`: a whole local Corral cluster on loopback, every service a child process of this one, state
// under ./.corral/ (secret, configs, logs, cluster.json). Ctrl-C (or SIGTERM) stops the services cleanly.
// `--demo` then exercises the cluster: the ratelimiter (FIFO permits across workers), two isolated sandboxes,
// and one episode through the proxy (an agent in a sandbox, its calls recorded as a trajectory).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "libs/core/block_lock.h"
#include "libs/core/token.h"
#include "libs/http/openai_json.h"
#include "libs/http/prometheus_text.h"
#include "libs/http/url.h"
#include "libs/process/supervise.h"
#include "libs/rpc/auth.h"
#include "openssl/rand.h"
#include "tools/corral/commands.h"
#include "tools/corral/demo.h"
#include "tools/corral/upstream_model.h"

namespace corral::cli {
namespace {

namespace fs = std::filesystem;

// The embedded playground configuration of each service.
constexpr char kRateLimiterYaml[] = R"(# corral up: the ratelimiter's playground configuration.
limits:
  # The scheduler holds one permit of code_exec/<language> for each tool execution, the sandbox API one for
  # each /run_code run.
  - name: code_exec/{language}
    kind: concurrency
    permits: 16
  - {name: demo, kind: concurrency, permits: 2}
  - {name: llm_tokens, kind: rate, rate_per_s: 5000, burst: 20000}
)";

struct UpFlags {
  std::string dir = ".corral";
  bool any_port = false;
  bool demo = false;
  bool exit_after_demo = false;
  int hosts = 1;
  std::string upstream;  // an OpenAI-compatible server instead of the scripted model
  std::string model;     // with --upstream: the model of tasks that name none
};

struct ServiceDef {
  std::string name;
  std::string binary;
  std::string config_yaml;
  std::string grpc_listen, metrics_listen;
  std::vector<std::string> extra_args;
};

using Running = std::vector<std::pair<ServiceDef, RunningService>>;

absl::StatusOr<std::string> EnsureSecret(const fs::path& dir) {
  fs::path path = dir / "secret";
  if (!fs::exists(path)) {
    unsigned char raw[32];
    RAND_bytes(raw, sizeof(raw));
    std::ofstream(path) << absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(raw), sizeof(raw))) << "\n";
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  }
  auto signer = TokenSigner::FromKeyFile(path.string());
  if (!signer.ok()) return signer.status();
  return path.string();
}

// The scheduler's playground configuration: every host, proxy and limiter of this cluster.
std::string SchedulerYaml(const fs::path& dir, const Running& running, const std::string& default_model) {
  std::string yaml =
      absl::StrCat("# corral up: the scheduler's playground configuration.\njournal: ", (dir / "scheduler.db").string(),
                   "\nscheduler_id: local\n");
  std::string hosts, proxies;
  for (const auto& [def, service] : running) {
    if (absl::StartsWith(def.name, "sandbox-host")) absl::StrAppend(&hosts, "  - ", service.ready.grpc, "\n");
    if (def.name == "proxy") absl::StrAppend(&proxies, "  - ", service.ready.grpc, "\n");
    if (def.name == "ratelimiter") absl::StrAppend(&yaml, "ratelimiter: ", service.ready.grpc, "\n");
  }
  // A small warm pool: the second batch of a spec starts in ready sandboxes, as on a real cluster.
  if (!hosts.empty()) absl::StrAppend(&yaml, "host:\n", hosts, "warm_pool_size: 8\nwarm_pool_idle: 2m\n");
  absl::StrAppend(&yaml, "proxy:\n", proxies);
  if (!default_model.empty()) absl::StrAppend(&yaml, "default_model: \"", absl::CEscape(default_model), "\"\n");
  absl::StrAppend(&yaml, "timeouts:\n  episode: 10m\n  agent: 5m\n");
  return yaml;
}

// What `upstream` serves (GET /v1/models) and which model tasks that name none use.
absl::StatusOr<ModelChoice> UpstreamModel(const std::string& upstream, const std::string& requested) {
  auto url = http::ParseHttpUrl(upstream, "--upstream");
  if (!url.ok()) return url.status();
  auto body = http::HttpGet(url->authority(), url->path + "/v1/models");
  std::optional<std::vector<std::string>> served;
  if (body.ok()) served = http::ModelIds(*body);
  return ChooseModel(served, body.ok() ? "" : std::string(body.status().message()), requested, upstream);
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

// The sandbox uids of this cluster: a block of kUidBlock uids in [20000, 20999], held by an flock for the
// cluster's lifetime. Two clusters on one machine must never share a uid: a host deleting a sandbox kills every
// process of its uid, so a shared uid would kill the other cluster's sandbox. Up to four clusters run at once.
constexpr uint32_t kUidFirst = 20000, kUidLast = 20999, kUidBlock = 250;
absl::StatusOr<LockedBlock> LockUidBlock() {
  std::optional<LockedBlock> block = LockFreeBlock("/var/tmp/corral-up-uids-", kUidFirst, kUidLast, kUidBlock);
  if (block) return *std::move(block);
  return absl::ResourceExhaustedError(absl::StrCat("every block of sandbox uids in [", kUidFirst, ", ", kUidLast,
                                                   "] is held by another `corral up` cluster on this machine (",
                                                   (kUidLast - kUidFirst + 1) / kUidBlock, " at most); stop one"));
}

// The services corral up starts before the proxy: the ratelimiter, and as root the sandbox hosts (their homes
// under `scratch_root` when `dir` is below /tmp, which a sandbox's view hides; their uids from `uids`, split
// between them).
std::vector<ServiceDef> BaseServices(const UpFlags& flags, const fs::path& dir, const std::string& bin, int uids,
                                     fs::path* scratch_root) {
  std::vector<ServiceDef> defs = {
      // The lease snapshot lets a restarted limiter grant again at once (no learning mode).
      {"ratelimiter", bin + "/corral-ratelimiter",
       absl::StrCat(kRateLimiterYaml, "state_path: ", (dir / "ratelimiter.db").string(), "\n"), "127.0.0.1:7400",
       "127.0.0.1:9400"},
  };
  // The sandbox host switches uids, so it needs root; without it the cluster runs without sandboxes.
  if (geteuid() != 0) {
    std::cout << "corral up: not root, so no sandbox host (it switches to each sandbox's uid)\n";
    return defs;
  }
  // Inside a sandbox's view /tmp is its own, so homes cannot live below /tmp.
  fs::path sandboxes = dir / "sandboxes";
  if (absl::StartsWith(sandboxes.string(), "/tmp/")) {
    sandboxes = fs::path("/var/tmp") / absl::StrCat("corral-up-", getpid(), "-sandboxes");
    *scratch_root = sandboxes;
  }
  // Hosts on one machine must not share sandbox uids (RLIMIT_NPROC, cgroups and sweeps count per uid).
  const int uids_each = static_cast<int>(kUidBlock) / flags.hosts;
  for (int i = 0; i < flags.hosts; ++i) {
    const std::string suffix = i == 0 ? "" : absl::StrCat("-", i + 1);
    defs.push_back(
        {"sandbox-host" + suffix, bin + "/corral-sandbox-host",
         absl::StrCat("# corral up: the sandbox host's playground configuration.\nroot: ",
                      (sandboxes / absl::StrCat("host", i + 1)).string(), "\ncapacity: ", std::min(64, uids_each),
                      "\ndefault_network: none\nhost_id: local", suffix, "\nuid_first: ", uids + i * uids_each,
                      "\nuid_last: ", uids + (i + 1) * uids_each - 1, "\n"),
         absl::StrCat("127.0.0.1:", 7500 + i), absl::StrCat("127.0.0.1:", 9500 + i)});
  }
  return defs;
}

// The sandbox API's playground configuration: sandboxes leased from this cluster's scheduler, /run_code bounded
// by the ratelimiter's code_exec.
std::string SandboxApiYaml(const Running& running) {
  std::string yaml = "# corral up: the sandbox API's playground configuration.\n";
  for (const auto& [def, service] : running) {
    if (def.name == "scheduler") absl::StrAppend(&yaml, "scheduler: ", service.ready.grpc, "\n");
    if (def.name == "ratelimiter") absl::StrAppend(&yaml, "ratelimiter: ", service.ready.grpc, "\n");
  }
  return absl::StrCat(yaml, "code_limit: code_exec\n");
}

// The model behind the proxy: --upstream (its model chosen from what it serves), or a scripted model started
// here as a stand-in for vLLM/SGLang (a demo aid).
struct Upstream {
  std::string url;
  std::string default_model;
  std::optional<RunningService> fake_llm;
};
absl::StatusOr<Upstream> StartUpstream(const UpFlags& flags, const fs::path& dir, const std::string& bin) {
  Upstream out{flags.upstream, "fake-model", std::nullopt};
  if (!out.url.empty()) {
    auto choice = UpstreamModel(out.url, flags.model);
    if (!choice.ok()) return choice.status();
    out.default_model = choice->model;
    std::cout << "corral up: model " << choice->note << "\n";
    return out;
  }
  auto started = StartService(bin + "/corral-fake-llm",
                              {"--listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "8000"), "--arithmetic"},
                              dir.string(), "fake-llm");
  if (!started.ok()) {
    return absl::Status(started.status().code(), absl::StrCat("cannot start fake-llm: ", started.status().message()));
  }
  out.fake_llm.emplace(*std::move(started));
  out.url = "http://" + out.fake_llm->ready.http;
  return out;
}

// Starts `defs` in order (the scheduler's configuration names the others' addresses, so it comes after them, and
// the sandbox API's names the scheduler's); stops at the first that fails (the caller's destructors stop the rest).
absl::Status StartAll(const UpFlags& flags, const fs::path& dir, const std::string& secret,
                      const std::string& default_model, std::vector<ServiceDef> defs, Running& running) {
  for (ServiceDef& def : defs) {
    if (def.name == "scheduler") def.config_yaml = SchedulerYaml(dir, running, default_model);
    if (def.name == "sandbox-api") def.config_yaml = SandboxApiYaml(running);
    if (!fs::exists(def.binary)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot start ", def.name, ": ", def.binary, " is not built (scripts/up builds every service)"));
    }
    const std::string config = (dir / (def.name + ".yaml")).string();
    std::ofstream(config, std::ios::trunc) << def.config_yaml;
    std::vector<std::string> args = {"--config=" + config, "--secret-file=" + secret,
                                     "--grpc-listen=" + (flags.any_port ? "127.0.0.1:0" : def.grpc_listen),
                                     "--metrics-listen=" + (flags.any_port ? "127.0.0.1:0" : def.metrics_listen)};
    args.insert(args.end(), def.extra_args.begin(), def.extra_args.end());
    auto service = StartService(def.binary, args, dir.string(), def.name);
    if (!service.ok()) {
      return absl::Status(service.status().code(),
                          absl::StrCat("cannot start ", def.name, ": ", service.status().message(),
                                       "\n  (log: ", (dir / (def.name + ".log")).string(), ")"));
    }
    running.emplace_back(def, *std::move(service));
  }
  return absl::OkStatus();
}

// <dir>/cluster.json: where every service listens, for the CLI and the SDK to find the cluster.
void WriteClusterJson(const fs::path& dir, const std::string& secret, const Running& running,
                      const std::optional<RunningService>& fake_llm) {
  std::ofstream cluster(dir / "cluster.json", std::ios::trunc);
  cluster << "{\"secret_file\":\"" << secret << "\"";
  for (auto& [def, service] : running) {
    cluster << ",\"" << def.name << "\":{\"grpc\":\"" << service.ready.grpc << "\",\"metrics\":\""
            << service.ready.metrics << "\",\"pid\":" << service.ready.pid
            << (service.ready.http.empty() ? "" : ",\"http\":\"" + service.ready.http + "\"") << "}";
  }
  if (fake_llm) {
    cluster << ",\"fake-llm\":{\"http\":\"" << fake_llm->ready.http << "\",\"pid\":" << fake_llm->ready.pid << "}";
  }
  cluster << "}\n";
}

void PrintCluster(const fs::path& dir, const Running& running, const Upstream& upstream) {
  std::cout << "corral up: cluster running (state and logs in " << dir.string() << ")\n";
  for (auto& [def, service] : running) {
    std::string http;
    if (!service.ready.http.empty()) {
      http = def.name == "scheduler"     ? "  inspector http://" + service.ready.http + "/"
             : def.name == "sandbox-api" ? "  http://" + service.ready.http + "/run_code, E2B API"
                                         : "  http://" + service.ready.http + "/v1";
    }
    std::cout << absl::StrFormat("  %-12s grpc %-18s metrics http://%s/metrics  pid %d%s\n", def.name,
                                 service.ready.grpc, service.ready.metrics, service.ready.pid, http);
  }
  if (upstream.fake_llm) {
    std::cout << absl::StrFormat("  %-12s http://%s/v1 (scripted model)  pid %d\n", "fake-llm",
                                 upstream.fake_llm->ready.http, upstream.fake_llm->ready.pid);
  } else {
    std::cout << "  upstream     " << upstream.url
              << (upstream.default_model.empty() ? "" : "  model " + upstream.default_model) << "\n";
  }
}

// The CLI as a command to paste: by the path it was started with.
fs::path CliPath(const std::string& bin) {
  std::error_code rel_ec;
  fs::path cli = fs::relative(fs::path(bin) / "corral", fs::current_path(), rel_ec);
  return rel_ec || cli.empty() ? fs::path(bin) / "corral" : cli;
}

// Hints that work when pasted while the cluster still runs.
std::string Hints(const fs::path& dir, const std::string& bin, const std::string& secret, const Running& running) {
  const fs::path cli = CliPath(bin);
  std::string inspector;
  for (auto& [def, service] : running) {
    if (def.name == "scheduler" && !service.ready.http.empty()) {
      inspector = absl::StrCat("  open http://", service.ready.http, "/ in a browser: the rollout inspector\n");
    }
    if (def.name == "sandbox-api") {
      absl::StrAppend(&inspector, "  curl -s http://", service.ready.http,
                      "/run_code -d '{\"code\": \"print(6 * 7)\", \"language\": \"python\"}'"
                      "  (SandboxFusion's API: verl's sandbox_fusion_url)\n",
                      "  export E2B_API_KEY=$(", cli.string(), " sandbox-api key me --secret-file ", secret,
                      ") E2B_API_URL=http://", service.ready.http, " E2B_SANDBOX_URL=http://", service.ready.http,
                      "  (the E2B API: an e2b SDK program runs unchanged)\n");
    }
  }
  return absl::StrCat("  ", cli.string(), " run examples/datasets/word_problems.jsonl --group-size 4\n", inspector,
                      "  ", cli.string(), " hosts ls;  ", cli.string(), " limiter status --addr ",
                      running.front().second.ready.grpc, " --secret-file ", secret, "\n",
                      "  python3: corral.Client() (clients/python) finds this cluster through ",
                      (dir / "cluster.json").string(), "\n");
}

// The demo: the limiter's, the sandboxes' (when a host runs) and a batch of GRPO groups. Its exit code.
int RunDemos(const std::string& secret, const Running& running) {
  const std::string token = MintClusterToken(*TokenSigner::FromKeyFile(secret));
  int exit_code = RunRateLimiterDemo(running.front().second.ready.grpc, token);
  std::string sandbox_host;
  for (auto& [def, service] : running) {
    if (def.name == "sandbox-host") sandbox_host = service.ready.grpc;
  }
  if (exit_code == 0 && !sandbox_host.empty()) exit_code = RunSandboxDemo(sandbox_host, token);
  for (auto& [def, service] : running) {
    if (def.name == "scheduler" && exit_code == 0) {
      exit_code = RunBatchDemo(service.ready.grpc, token, /*sandboxes=*/!sandbox_host.empty());
    }
  }
  for (auto& [def, service] : running) {
    if (def.name == "sandbox-api" && exit_code == 0) exit_code = RunCodeDemo(service.ready.http);
    if (def.name == "sandbox-api" && exit_code == 0) exit_code = RunE2bDemo(service.ready.http, secret);
  }
  return exit_code;
}

// Waits for Ctrl-C (or SIGTERM), or for a service to exit on its own (then 1, with its log).
int WaitForStop(const sigset_t& signals, Running& running) {
  std::cout << "Ctrl-C stops the cluster.\n" << std::flush;
  while (true) {
    const timespec tick{0, 200'000'000};
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) return 0;
    for (auto& [def, service] : running) {
      if (service.process.Wait(absl::ZeroDuration()).ok()) {
        std::cerr << "corral up: " << def.name << " exited unexpectedly; its log:\n" << service.process.Log();
        return 1;
      }
    }
  }
}

// SIGTERM to each service, the scheduler first, each given 15 s.
void StopAll(Running& running) {
  std::cout << "corral up: stopping\n" << std::flush;
  for (auto it = running.rbegin(); it != running.rend(); ++it) {
    it->second.process.Signal(SIGTERM);
    auto status = it->second.process.Wait(absl::Seconds(15));
    if (!status.ok()) std::cerr << "corral up: " << it->first.name << " did not stop in 15 s; killing it\n";
  }
}

int RunUp(const UpFlags& flags) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // children get a clean mask (Subprocess::Start)

  const fs::path dir = fs::absolute(flags.dir);
  fs::create_directories(dir);
  auto secret = EnsureSecret(dir);
  if (!secret.ok()) {
    std::cerr << "corral up: " << secret.status().message() << "\n";
    return 1;
  }
  const std::string bin = SelfDir();
  fs::path scratch_root;  // sandbox homes outside `dir`, removed when the cluster stops
  std::optional<LockedBlock> uids;
  if (geteuid() == 0) {
    auto locked = LockUidBlock();
    if (!locked.ok()) {
      std::cerr << "corral up: " << locked.status().message() << "\n";
      return 1;
    }
    uids = *std::move(locked);
  }
  std::vector<ServiceDef> defs = BaseServices(flags, dir, bin, uids ? static_cast<int>(uids->first) : 0, &scratch_root);
  auto upstream = StartUpstream(flags, dir, bin);
  if (!upstream.ok()) {
    std::cerr << "corral up: " << upstream.status().message() << "\n";
    return flags.upstream.empty() ? 1 : 2;  // (2: the --upstream given is not one to use)
  }
  defs.push_back({"proxy",
                  bin + "/corral-proxy",
                  absl::StrCat("# corral up: the proxy's playground configuration.\njournal: ",
                               (dir / "proxy.db").string(), "\nupstream: [\"", upstream->url, "\"]\n",
                               upstream->default_model.empty()
                                   ? ""
                                   : absl::StrCat("default_model: \"", absl::CEscape(upstream->default_model), "\"\n")),
                  "127.0.0.1:7600",
                  "127.0.0.1:9600",
                  {"--http-listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "8080")}});
  // The scheduler comes last: its configuration names the others' addresses. Its HTTP port serves the inspector.
  defs.push_back({"scheduler",
                  bin + "/corral-scheduler",
                  "",
                  "127.0.0.1:7700",
                  "127.0.0.1:9700",
                  {"--http-listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "7780")}});
  // The sandbox APIs (SandboxFusion's /run_code) lease sandboxes from the scheduler: only with a sandbox host.
  if (geteuid() == 0) {
    defs.push_back({"sandbox-api",
                    bin + "/corral-sandbox-api",
                    "",
                    "127.0.0.1:7800",
                    "127.0.0.1:9800",
                    {"--http-listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "8090")}});
  }
  Running running;
  if (absl::Status s = StartAll(flags, dir, *secret, upstream->default_model, std::move(defs), running); !s.ok()) {
    std::cerr << "corral up: " << s.message() << "\n";
    return 1;  // the destructors stop whatever already started
  }
  WriteClusterJson(dir, *secret, running, upstream->fake_llm);
  PrintCluster(dir, running, *upstream);
  const std::string hints = Hints(dir, bin, *secret, running);
  const bool stop_after_demo = flags.demo && flags.exit_after_demo;
  if (!stop_after_demo) std::cout << "try, in another terminal:\n" << hints << std::flush;

  int exit_code = flags.demo ? RunDemos(*secret, running) : 0;
  if (!stop_after_demo) exit_code = std::max(exit_code, WaitForStop(signals, running));
  StopAll(running);
  std::error_code ec;
  if (!scratch_root.empty()) fs::remove_all(scratch_root, ec);
  std::cout << "corral up: stopped\n";
  if (stop_after_demo && exit_code == 0) {
    std::cout << "To keep a cluster running, start it with `scripts/up --stay` (or `" << CliPath(bin).string()
              << " up`), then in another terminal:\n"
              << hints;
  }
  return exit_code;
}

}  // namespace

void RegisterUp(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<UpFlags>();
  CLI::App* up = app.add_subcommand("up", "start a local Corral cluster on loopback (every service a child process)");
  up->add_option("--dir", flags->dir, "where the cluster keeps its secret, configs, logs and cluster.json")
      ->capture_default_str();
  up->add_flag("--any-port", flags->any_port, "let the kernel choose free ports instead of 7400/9400, …");
  up->add_flag("--demo", flags->demo, "once up, run a short demo against the cluster");
  up->add_flag("--exit-after-demo", flags->exit_after_demo, "stop the cluster when the demo is done");
  up->add_option("--hosts", flags->hosts, "sandbox hosts to start (as root)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  up->add_option(
      "--upstream", flags->upstream,
      "an OpenAI-compatible server (vLLM, SGLang) for the proxy instead of the scripted model, http://HOST:PORT");
  up->add_option("--model", flags->model,
                 "with --upstream: the model of tasks that name none (default: the one model the upstream serves)");
  up->callback([flags, &exit_code] { exit_code = RunUp(*flags); });
}

}  // namespace corral::cli
