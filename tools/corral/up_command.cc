// `corral up`: a whole local Corral cluster on loopback, every service a child process of this one, state
// under ./.corral/ (secret, configs, logs, cluster.json). Ctrl-C (or SIGTERM) stops the services cleanly.
// `--demo` then exercises the cluster: the ratelimiter (FIFO permits across workers), two isolated sandboxes,
// and one episode through the proxy (an agent in a sandbox, its calls recorded as a trajectory).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  # The scheduler holds one permit of code_exec/<language> for each tool execution.
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
std::string SchedulerYaml(const fs::path& dir, const std::vector<std::pair<ServiceDef, RunningService>>& running,
                          const std::string& default_model) {
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
  std::vector<ServiceDef> defs = {
      // The lease snapshot lets a restarted limiter grant again at once (no learning mode).
      {"ratelimiter", bin + "/corral-ratelimiter",
       absl::StrCat(kRateLimiterYaml, "state_path: ", (dir / "ratelimiter.db").string(), "\n"), "127.0.0.1:7400",
       "127.0.0.1:9400"},
  };
  // The sandbox host switches uids, so it needs root; without it the cluster runs without sandboxes.
  if (geteuid() == 0) {
    // Inside a sandbox's view /tmp is its own, so homes cannot live below /tmp.
    fs::path sandboxes = dir / "sandboxes";
    if (absl::StartsWith(sandboxes.string(), "/tmp/")) {
      sandboxes = fs::path("/var/tmp") / absl::StrCat("corral-up-", getpid(), "-sandboxes");
      scratch_root = sandboxes;
    }
    // Hosts on one machine must not share sandbox uids (RLIMIT_NPROC, cgroups and sweeps count per uid).
    const int uids_each = 45000 / flags.hosts;
    for (int i = 0; i < flags.hosts; ++i) {
      const std::string suffix = i == 0 ? "" : absl::StrCat("-", i + 1);
      defs.push_back({"sandbox-host" + suffix, bin + "/corral-sandbox-host",
                      absl::StrCat("# corral up: the sandbox host's playground configuration.\nroot: ",
                                   (sandboxes / absl::StrCat("host", i + 1)).string(),
                                   "\ncapacity: 64\ndefault_network: none\nhost_id: local", suffix, "\nuid_first: ",
                                   20000 + i * uids_each, "\nuid_last: ", 20000 + (i + 1) * uids_each - 1, "\n"),
                      absl::StrCat("127.0.0.1:", 7500 + i), absl::StrCat("127.0.0.1:", 9500 + i)});
    }
  } else {
    std::cout << "corral up: not root, so no sandbox host (it switches to each sandbox's uid)\n";
  }

  // A scripted model stands in for vLLM/SGLang in the playground (a demo aid); --upstream points the proxy at a
  // real OpenAI-compatible server instead.
  std::optional<RunningService> fake_llm;
  std::string upstream = flags.upstream;
  std::string default_model = "fake-model";
  if (!upstream.empty()) {
    auto choice = UpstreamModel(upstream, flags.model);
    if (!choice.ok()) {
      std::cerr << "corral up: " << choice.status().message() << "\n";
      return 2;
    }
    default_model = choice->model;
    std::cout << "corral up: model " << choice->note << "\n";
  } else {
    auto started = StartService(bin + "/corral-fake-llm",
                                {"--listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "8000"), "--arithmetic"},
                                dir.string(), "fake-llm");
    if (!started.ok()) {
      std::cerr << "corral up: cannot start fake-llm: " << started.status().message() << "\n";
      return 1;
    }
    fake_llm.emplace(*std::move(started));
    upstream = "http://" + fake_llm->ready.http;
  }
  defs.push_back(
      {"proxy",
       bin + "/corral-proxy",
       absl::StrCat(
           "# corral up: the proxy's playground configuration.\njournal: ", (dir / "proxy.db").string(),
           "\nupstream: [\"", upstream, "\"]\n",
           default_model.empty() ? "" : absl::StrCat("default_model: \"", absl::CEscape(default_model), "\"\n")),
       "127.0.0.1:7600",
       "127.0.0.1:9600",
       {"--http-listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "8080")}});
  // The scheduler comes last: its configuration names the others' addresses.
  // Its HTTP port serves the rollout inspector.
  defs.push_back({"scheduler",
                  bin + "/corral-scheduler",
                  "",
                  "127.0.0.1:7700",
                  "127.0.0.1:9700",
                  {"--http-listen=127.0.0.1:" + std::string(flags.any_port ? "0" : "7780")}});
  std::vector<std::pair<ServiceDef, RunningService>> running;
  for (ServiceDef& def : defs) {
    if (def.name == "scheduler") def.config_yaml = SchedulerYaml(dir, running, default_model);
    const std::string config = (dir / (def.name + ".yaml")).string();
    std::ofstream(config, std::ios::trunc) << def.config_yaml;
    std::vector<std::string> args = {"--config=" + config, "--secret-file=" + *secret,
                                     "--grpc-listen=" + (flags.any_port ? "127.0.0.1:0" : def.grpc_listen),
                                     "--metrics-listen=" + (flags.any_port ? "127.0.0.1:0" : def.metrics_listen)};
    args.insert(args.end(), def.extra_args.begin(), def.extra_args.end());
    auto service = StartService(def.binary, args, dir.string(), def.name);
    if (!service.ok()) {
      std::cerr << "corral up: cannot start " << def.name << ": " << service.status().message()
                << "\n  (log: " << (dir / (def.name + ".log")).string() << ")\n";
      return 1;  // the destructors stop whatever already started
    }
    running.emplace_back(def, *std::move(service));
  }

  std::ofstream cluster(dir / "cluster.json", std::ios::trunc);
  cluster << "{\"secret_file\":\"" << *secret << "\"";
  for (auto& [def, service] : running) {
    cluster << ",\"" << def.name << "\":{\"grpc\":\"" << service.ready.grpc << "\",\"metrics\":\""
            << service.ready.metrics << "\",\"pid\":" << service.ready.pid
            << (service.ready.http.empty() ? "" : ",\"http\":\"" + service.ready.http + "\"") << "}";
  }
  if (fake_llm) {
    cluster << ",\"fake-llm\":{\"http\":\"" << fake_llm->ready.http << "\",\"pid\":" << fake_llm->ready.pid << "}";
  }
  cluster << "}\n";
  cluster.close();

  std::cout << "corral up: cluster running (state and logs in " << dir.string() << ")\n";
  for (auto& [def, service] : running) {
    std::string http;
    if (!service.ready.http.empty()) {
      http = def.name == "scheduler" ? "  inspector http://" + service.ready.http + "/"
                                     : "  http://" + service.ready.http + "/v1";
    }
    std::cout << absl::StrFormat("  %-12s grpc %-18s metrics http://%s/metrics  pid %d%s\n", def.name,
                                 service.ready.grpc, service.ready.metrics, service.ready.pid, http);
  }
  if (fake_llm) {
    std::cout << absl::StrFormat("  %-12s http://%s/v1 (scripted model)  pid %d\n", "fake-llm", fake_llm->ready.http,
                                 fake_llm->ready.pid);
  } else {
    std::cout << "  upstream     " << upstream << (default_model.empty() ? "" : "  model " + default_model) << "\n";
  }
  const std::string& limiter_addr = running.front().second.ready.grpc;
  // Hints that work when pasted: the CLI by the path it was started with, while the cluster still runs.
  std::error_code rel_ec;
  fs::path cli = fs::relative(fs::path(bin) / "corral", fs::current_path(), rel_ec);
  if (rel_ec || cli.empty()) cli = fs::path(bin) / "corral";
  std::string inspector;
  for (auto& [def, service] : running) {
    if (def.name == "scheduler" && !service.ready.http.empty()) {
      inspector = absl::StrCat("  open http://", service.ready.http, "/ in a browser: the rollout inspector\n");
    }
  }
  const std::string hints = absl::StrCat(
      "  ", cli.string(), " run examples/datasets/word_problems.jsonl --group-size 4\n", inspector, "  ", cli.string(),
      " hosts ls;  ", cli.string(), " limiter status --addr ", limiter_addr, " --secret-file ", *secret, "\n",
      "  python3: corral.Client() (clients/python) finds this cluster through ", (dir / "cluster.json").string(), "\n");
  if (!(flags.demo && flags.exit_after_demo)) std::cout << "try, in another terminal:\n" << hints << std::flush;

  int exit_code = 0;
  bool stop = false;
  if (flags.demo) {
    const std::string token = MintClusterToken(*TokenSigner::FromKeyFile(*secret));
    exit_code = RunRateLimiterDemo(limiter_addr, token);
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
    stop = flags.exit_after_demo;
  }
  if (!stop) std::cout << "Ctrl-C stops the cluster.\n" << std::flush;
  while (!stop) {
    const timespec tick{0, 200'000'000};
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) break;
    for (auto& [def, service] : running) {
      if (service.process.Wait(absl::ZeroDuration()).ok()) {
        std::cerr << "corral up: " << def.name << " exited unexpectedly; its log:\n" << service.process.Log();
        exit_code = 1;
        stop = true;
      }
    }
  }
  std::cout << "corral up: stopping\n" << std::flush;
  for (auto it = running.rbegin(); it != running.rend(); ++it) {
    it->second.process.Signal(SIGTERM);
    auto status = it->second.process.Wait(absl::Seconds(15));
    if (!status.ok()) std::cerr << "corral up: " << it->first.name << " did not stop in 15 s; killing it\n";
  }
  std::error_code ec;
  if (!scratch_root.empty()) fs::remove_all(scratch_root, ec);
  std::cout << "corral up: stopped\n";
  if (flags.demo && flags.exit_after_demo && exit_code == 0) {
    std::cout << "To keep a cluster running, start it with `scripts/up --stay` (or `" << cli.string()
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
