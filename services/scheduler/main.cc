// corral-scheduler: composition root. Parses config, then builds in dependency order:
// journal (read back) → episode table (restored) → event loop → host registry, proxy and limiter clients →
// episode driver → scheduler (dispatcher, drains) → gRPC adapter → the inspector's HTTP server → server runner;
// runs until SIGTERM.
//
// Threads: gRPC's callback threads (adapters only: nothing blocks on them), `io_threads` event-loop threads
// (every episode is a coroutine there; host polling, the dispatcher and the ticker too), the journal's writer
// thread, the ratelimiter client's connection thread, and `http_threads` serving the inspector.
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"
#include "libs/core/clock.h"
#include "libs/core/host_port.h"
#include "libs/core/logging.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/server_runner.h"
#include "services/ratelimiter/client/ratelimit_client.h"
#include "services/scheduler/config.h"
#include "services/scheduler/episode_driver.h"
#include "services/scheduler/episode_table.h"
#include "services/scheduler/host_registry.h"
#include "services/scheduler/inspector.h"
#include "services/scheduler/inspector_http.h"
#include "services/scheduler/metrics.h"
#include "services/scheduler/pause_ledger.h"
#include "services/scheduler/result_stream.h"
#include "services/scheduler/scheduler.h"
#include "services/scheduler/scheduler_journal.h"
#include "libs/async/spawn.h"
#include "services/scheduler/policy_control.h"
#include "services/scheduler/scheduler_service.h"
#include "services/scheduler/submission.h"
#include "services/scheduler/warm_pool.h"
#include "services/scheduler/limiter_client.h"
#include "services/scheduler/proxy_client.h"
#include "absl/synchronization/notification.h"
#include "spdlog/spdlog.h"

namespace {

namespace asio = boost::asio;
using namespace corral::scheduler;  // NOLINT: the composition root names every piece

// Closes the proxy sessions of attempts a previous run left running (their sandboxes are swept by label when
// each host is first polled).
void CloseLeftoverSessions(const Snapshot& snapshot, const std::vector<std::shared_ptr<ProxyApi>>& proxies) {
  int n = 0;
  for (const auto& run : snapshot.runs) {
    if (!run.running) continue;
    // The session may have been opened before the placement was journaled: its id is known all the same.
    const std::string env_id = EnvId(run.episode_id, run.runs);
    for (const auto& p : proxies) p->CloseAsync(env_id);
    ++n;
  }
  if (n > 0) spdlog::info("closing {} proxy session(s) of episodes interrupted by the last shutdown", n);
}

}  // namespace

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();  // before any thread exists, so only the runner receives SIGTERM

  Config config;
  if (auto exit_code = corral::LoadServiceConfig(
          "corral-scheduler", "Batches of RL episodes in, rewarded trajectories out: the trainer's door.", "scheduler",
          config, RegisterConfig, ValidateConfig, argc, argv)) {
    return *exit_code;
  }
  auto secret = corral::LoadClusterSecret(config.server);
  if (!secret.ok()) {
    spdlog::error("cannot start: {}", secret.status());
    return 1;
  }
  const corral::CallAuthenticator auth = corral::MakeCallAuthenticator(config.server, *secret);
  // The token this scheduler presents to hosts, proxies and the limiter (none when they run --insecure too).
  const std::string peer_token = auth.insecure() ? "" : corral::MintClusterToken(*secret);
  corral::ChannelOptions channel;
  channel.tls = config.server.tls;

  corral::ServerRunner runner("scheduler", config.server);
  SchedulerMetrics metrics(*runner.registry());

  // The journal first: what a previous run accepted is restored before anything new is.
  auto journal = SchedulerJournal::Open(config.journal, config.journal_fsync, config.result_retention);
  if (!journal.ok()) {
    spdlog::error("cannot open the journal {}: {}", config.journal, journal.status());
    return 1;
  }
  (*journal)->journal()->OnWriteFailed([&metrics](const absl::Status&) { metrics.JournalWriteFailed(); });
  const absl::Time load_start = absl::Now();
  auto snapshot = (*journal)->Load();
  if (!snapshot.ok()) {
    spdlog::error("cannot read the journal {}: {}", config.journal, snapshot.status());
    return 1;
  }
  SubmitLimits limits;
  limits.max_batch_tasks = config.max_batch_tasks;
  limits.max_group_size = config.max_group_size;
  limits.default_max_attempts = config.default_max_attempts;
  limits.default_runner = ParseRunner(config.default_runner);
  corral::RealClock clock;
  EpisodeTable table(&clock, journal->get(), limits, config.max_pending_episodes, config.retry);
  table.Restore(*snapshot);
  spdlog::info("journal {}: {} batch(es), {} result(s), {} episode(s) queued, read in {}", config.journal,
               snapshot->batches.size(), snapshot->results.size(), table.QueuedCount(),
               absl::FormatDuration(absl::Now() - load_start));

  // The event loop every episode runs on.
  asio::io_context io;
  auto work = asio::make_work_guard(io);

  RegistryOptions registry_options;
  registry_options.scheduler_id = config.scheduler_id;
  registry_options.token = peer_token;
  registry_options.channel = channel;
  registry_options.poll_interval = config.host_poll_interval;
  registry_options.unreachable_after = config.host_unreachable_after;
  registry_options.dns = config.hosts_dns;
  registry_options.dns_interval = config.dns_interval;
  HostRegistry hosts(registry_options, config.hosts, &clock);

  std::vector<std::shared_ptr<ProxyApi>> proxies;
  for (const auto& address : config.proxies) {
    auto ch = corral::MakeChannel(address, channel);
    if (!ch.ok()) {
      spdlog::error("proxy {}: {}", address, ch.status());
      return 2;
    }
    proxies.push_back(std::make_shared<ProxyClient>(address, *ch, peer_token));
  }
  CloseLeftoverSessions(*snapshot, proxies);
  (*journal)->ForgetRuns();

  auto limiter_client = corral::ratelimiter::RateLimitClient::ConnectService(
      config.ratelimiter, peer_token, config.scheduler_id, channel, config.limiter_fail_open);
  if (!limiter_client.ok()) {
    spdlog::error("cannot start: {}", limiter_client.status());
    return 1;
  }
  std::unique_ptr<corral::ratelimiter::RateLimitClient> limiter_session = *std::move(limiter_client);
  LimiterClient limiter(limiter_session.get());

  RunnerOptions runner_options;
  runner_options.timeouts = config.timeouts;
  runner_options.default_max_turns = config.default_max_turns;
  runner_options.default_model = config.default_model;
  runner_options.capture_token_ids = config.capture_token_ids;
  runner_options.scheduler_id = config.scheduler_id;
  runner_options.tool_limit = config.tool_limit;
  runner_options.llm_limit = config.llm_limit;
  runner_options.llm_call_timeout = config.llm_call_timeout;
  // The warm pool's room is the scheduler's to say; the scheduler is built after the driver, so a late binding.
  std::function<int64_t()> warm_room = [] { return int64_t{0}; };
  std::unique_ptr<WarmPool> pool;
  if (config.warm_pool_size > 0) {
    pool = std::make_unique<WarmPool>(&hosts, &clock, config.warm_pool_size, config.scheduler_id, [&warm_room] { return warm_room(); },
                                      config.warm_pool_idle);
  }
  EpisodeDriver driver(io.get_executor(), &clock, runner_options, &table, &hosts, proxies, &limiter, &metrics,
                       pool.get());
  PauseLedger pauses;  // generation pauses (PolicyControl): not counted against episode and agent timeouts
  driver.set_pauses(&pauses);

  SchedulerOptions scheduler_options;
  scheduler_options.max_concurrent_episodes = config.max_concurrent_episodes;
  scheduler_options.drain_grace = config.drain_grace;
  scheduler_options.limits = limits;
  Scheduler scheduler(io, scheduler_options, &table, &hosts, &driver, &metrics, pool.get());
  warm_room = [&scheduler] { return scheduler.WarmRoom(); };
  hosts.set_on_lost([&scheduler](const std::string& address) { scheduler.HostLost(address); });
  hosts.set_on_capacity([&scheduler] { scheduler.Kick(); });
  driver.set_on_finished([&scheduler] { scheduler.Kick(); });

  ResultHub hub;
  table.set_on_change([&hub] { hub.NotifyAll(); });
  auto policy_state = (*journal)->LoadPolicy();
  if (!policy_state.ok()) {
    spdlog::error("cannot start: the journal's policy state cannot be read: {}", policy_state.status());
    return 1;
  }
  PolicyControl policy(io.get_executor(), journal->get(), proxies, *policy_state, &pauses);
  table.SetPolicyVersion(policy_state->version);
  table.set_observer(&metrics);  // from here on: what the restored state replayed is not reported
  policy.set_on_version([&table, &scheduler](int64_t version) {
    table.SetPolicyVersion(version);  // may admit more groups (max_staleness) or re-queue stale results
    scheduler.Kick();
  });
  if (policy_state->sequence > 0) {
    spdlog::info("policy version {}{} (from the journal)", policy_state->version,
                 policy_state->paused ? ", generation paused" : "");
  }
  SchedulerService service(&scheduler, &table, &hosts, &hub, &auth, &policy);
  runner.AddService(&service, "corral.v1.Scheduler");

  // The rollout inspector, and the retention of the acknowledged results it shows.
  Inspector inspector(&table, [&journal](const std::string& id) { return (*journal)->AckedResult(id); });
  std::unique_ptr<corral::http::HttpServer> http;
  std::string http_address;
  // Task data (prompts, answers, trajectories) only with the cluster token, on every interface: a sandbox with
  // an open network on this machine reaches loopback too. (An --insecure cluster asks for nothing.)
  const bool require_token = !auth.insecure();
  if (!config.http_listen.empty()) {
    const std::string host = corral::SplitHostPort(config.http_listen)->first;  // validated with the config
    http = std::make_unique<corral::http::HttpServer>(corral::http::ServerLimits{},
                                                      MakeInspectorHandler(&inspector, &auth, require_token),
                                                      static_cast<int>(config.http_threads));
    auto port = http->Listen(config.http_listen);
    if (!port.ok()) {
      spdlog::error("cannot start the inspector: {}", port.status());
      return 1;
    }
    http_address = corral::JoinHostPort(host, *port);
    runner.set_extra_ready_address(http_address);
  }
  // The retention sweep: a blocking SQLite update each minute, on a thread of its own (not the clock's, whose
  // timers wake the episodes' sleeps).
  absl::Notification retention_stop;
  std::thread retention;
  if (config.result_retention > absl::ZeroDuration()) {
    retention = std::thread([&] {
      do {
        auto dropped = (*journal)->DropAckedBefore(absl::Now() - config.result_retention);
        if (!dropped.ok()) spdlog::warn("result retention: {}", dropped.status());
        if (dropped.ok() && *dropped > 0) spdlog::info("result retention: dropped {} acknowledged result(s)", *dropped);
      } while (!retention_stop.WaitForNotificationWithTimeout(absl::Minutes(1)));
    });
  }

  std::vector<std::thread> threads;
  for (int64_t i = 0; i < config.io_threads; ++i) threads.emplace_back([&io] { io.run(); });
  if (auto s = runner.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
    return 1;
  }
  spdlog::info("scheduler '{}': {} static host(s){}, proxies {}, {}", config.scheduler_id, config.hosts.size(),
               config.hosts_dns.empty() ? "" : " + dns " + config.hosts_dns, absl::StrJoin(config.proxies, ", "),
               config.ratelimiter.empty() ? "tools unlimited" : "tool limit " + config.tool_limit + " at " + config.ratelimiter);
  if (http) {
    spdlog::info("rollout inspector: http://{}/{}", http_address,
                 require_token ? " (with the cluster token: `corral ui` prints a link)" : "");
  }
  scheduler.Start();
  std::atomic<bool> policy_stopping{false};
  corral::async::Spawn(io, policy.Run(&policy_stopping, config.policy_sync_interval), "pushing the policy state");
  runner.Wait();
  policy_stopping = true;
  if (http) http->Stop();

  // Shutdown: stop starting episodes; running ones go back to the queue (journaled) and are re-run by the next
  // start; give them a moment to close their sessions and delete their sandboxes.
  scheduler.Stop();
  for (auto& run : table.Running("")) run->Stop(StopReason::kRequeue, "the scheduler is shutting down");
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (driver.running() > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
  if (pool) {
    // Warm sandboxes are deleted (a restart's sweep would find them otherwise).
    auto drained = asio::co_spawn(io, pool->Drain(), asio::use_future);
    drained.wait_for(std::chrono::seconds(10));
  }
  work.reset();
  io.stop();
  for (auto& t : threads) t.join();
  table.set_on_change(nullptr);
  retention_stop.Notify();
  if (retention.joinable()) retention.join();
  // The journal flushes what is queued now, while the table its callbacks reach is still alive.
  journal->reset();
  clock.Stop();
  spdlog::info("scheduler stopped");
  return 0;
}
