#include "services/scheduler/scheduler_root.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/co_spawn.hpp"
#include "boost/asio/use_future.hpp"
#include "libs/async/spawn.h"
#include "libs/core/host_port.h"
#include "libs/rpc/channel.h"
#include "services/scheduler/inspector_http.h"
#include "services/scheduler/remote/proxy_client.h"
#include "services/scheduler/table/submission.h"
#include "spdlog/spdlog.h"

namespace corral::scheduler {

namespace asio = boost::asio;

namespace {

SubmitLimits LimitsOf(const Config& config) {
  SubmitLimits limits;
  limits.max_batch_tasks = config.max_batch_tasks;
  limits.max_group_size = config.max_group_size;
  limits.default_max_attempts = config.default_max_attempts;
  limits.default_runner = ParseRunner(config.default_runner);
  return limits;
}

RegistryOptions RegistryOptionsOf(const Config& config, const std::string& peer_token) {
  RegistryOptions options;
  options.scheduler_id = config.scheduler_id;
  options.token = peer_token;
  options.channel.tls = config.server.tls;
  options.poll_interval = config.host_poll_interval;
  options.unreachable_after = config.host_unreachable_after;
  options.dns = config.hosts_dns;
  options.dns_interval = config.dns_interval;
  return options;
}

RunnerOptions RunnerOptionsOf(const Config& config) {
  RunnerOptions options;
  options.timeouts = config.timeouts;
  options.default_max_turns = config.default_max_turns;
  options.default_model = config.default_model;
  options.capture_token_ids = config.capture_token_ids;
  options.scheduler_id = config.scheduler_id;
  options.tool_limit = config.tool_limit;
  options.llm_limit = config.llm_limit;
  options.llm_call_timeout = config.llm_call_timeout;
  options.prices = config.prices;
  options.measure_usage = config.measure_usage;
  return options;
}

LeaseOptions LeaseOptionsOf(const Config& config, SchedulerMetrics* metrics) {
  LeaseOptions options;
  options.scheduler_id = config.scheduler_id;
  options.default_wait = config.timeouts.acquire;
  options.setup_timeout = config.timeouts.setup;
  // A leased sandbox is a sandbox API's (E2B, /run_code): its lease's owner is the tenant (the API key's name).
  options.on_retired = [metrics, prices = config.prices](const std::string& owner, const v1::ResourceUsage& usage) {
    metrics->SandboxRetired(owner.empty() ? "default" : owner, SandboxUsageTotals(usage, prices));
  };
  return options;
}

SchedulerOptions SchedulerOptionsOf(const Config& config) {
  SchedulerOptions options;
  options.max_concurrent_episodes = config.max_concurrent_episodes;
  options.drain_grace = config.drain_grace;
  options.limits = LimitsOf(config);
  return options;
}

}  // namespace

struct SchedulerRoot::Prepared {
  std::optional<CallAuthenticator> auth;
  std::string peer_token;
  std::unique_ptr<SchedulerJournal> journal;
  Snapshot snapshot;
  absl::Duration load_time;
  PolicyState policy;
  std::vector<v1::SandboxLease> leases;
  std::vector<v1::SandboxTemplate> templates;
  std::vector<TemplateFileEntry> template_files;
  std::vector<std::shared_ptr<ProxyApi>> proxies;
  std::unique_ptr<ratelimiter::RateLimitClient> limiter_session;
};

absl::StatusOr<std::unique_ptr<SchedulerRoot>> SchedulerRoot::Build(Config config) {
  Prepared p;
  auto secret = LoadClusterSecret(config.server);
  if (!secret.ok()) return secret.status();
  p.auth = MakeCallAuthenticator(config.server, *secret);
  p.peer_token = p.auth->insecure() ? "" : MintClusterToken(*secret);
  ChannelOptions channel;
  channel.tls = config.server.tls;

  // The journal first: what a previous run accepted is restored before anything new is.
  auto journal = SchedulerJournal::Open(config.journal, config.journal_fsync, config.result_retention);
  if (!journal.ok()) {
    return absl::Status(journal.status().code(),
                        absl::StrCat("cannot open the journal ", config.journal, ": ", journal.status().message()));
  }
  p.journal = *std::move(journal);
  const absl::Time load_start = absl::Now();
  auto snapshot = p.journal->Load();
  if (!snapshot.ok()) {
    return absl::Status(snapshot.status().code(),
                        absl::StrCat("cannot read the journal ", config.journal, ": ", snapshot.status().message()));
  }
  p.snapshot = *std::move(snapshot);
  p.load_time = absl::Now() - load_start;
  auto policy = p.journal->LoadPolicy();
  if (!policy.ok()) {
    return absl::Status(policy.status().code(),
                        absl::StrCat("the journal's policy state cannot be read: ", policy.status().message()));
  }
  p.policy = *policy;
  auto shift = p.journal->AdoptClock(ProcessAnchor());
  if (!shift.ok()) {
    return absl::Status(shift.status().code(),
                        absl::StrCat("the journal's clock anchor cannot be kept: ", shift.status().message()));
  }
  if (*shift != absl::ZeroDuration()) {
    spdlog::info(
        "journal: the wall clock has stepped by {} since its first writer on this boot started; its "
        "leases' times are read on this process's clock",
        absl::FormatDuration(*shift));
  }
  auto leases = p.journal->LoadLeases();
  if (!leases.ok()) {
    return absl::Status(leases.status().code(),
                        absl::StrCat("the journal's sandbox leases cannot be read: ", leases.status().message()));
  }
  p.leases = *std::move(leases);
  auto templates = p.journal->LoadTemplates();
  auto template_files = p.journal->LoadTemplateFiles();
  if (!templates.ok() || !template_files.ok()) {
    const absl::Status& bad = !templates.ok() ? templates.status() : template_files.status();
    return absl::Status(bad.code(), absl::StrCat("the journal's sandbox templates cannot be read: ", bad.message()));
  }
  p.templates = *std::move(templates);
  p.template_files = *std::move(template_files);

  for (const auto& address : config.proxies) {
    auto ch = MakeChannel(address, channel);
    if (!ch.ok()) return absl::InvalidArgumentError(absl::StrCat("proxy ", address, ": ", ch.status().message()));
    p.proxies.push_back(std::make_shared<ProxyClient>(address, *ch, p.peer_token));
  }
  auto limiter = ratelimiter::RateLimitClient::ConnectService(config.ratelimiter, p.peer_token, config.scheduler_id,
                                                              channel, config.limiter_fail_open);
  if (!limiter.ok()) return limiter.status();
  p.limiter_session = *std::move(limiter);
  return std::unique_ptr<SchedulerRoot>(new SchedulerRoot(std::move(config), std::move(p)));
}

SchedulerRoot::SchedulerRoot(Config config, Prepared p)
    : config_(std::move(config)),
      auth_(*std::move(p.auth)),
      peer_token_(std::move(p.peer_token)),
      runner_("scheduler", config_.server),
      metrics_(*runner_.registry()),
      journal_(std::move(p.journal)),
      work_(asio::make_work_guard(io_)),
      doorbell_(io_),
      table_(&clock_, journal_.get(), LimitsOf(config_), config_.max_pending_episodes, config_.retry,
             TableHooks{.on_change = [this] { hub_.NotifyAll(); },
                        .observer = &metrics_,
                        .on_driven_result = [this](const v1::EpisodeResult& r) { envs_.Ended(r); }}),
      hosts_(RegistryOptionsOf(config_, peer_token_), config_.hosts, &clock_,
             HostRegistry::Events{.lost = [this](const std::string& address) { StopRunsOnLostHost(table_, address); },
                                  .capacity = [this] { doorbell_.Ring(); }}),
      proxies_(std::move(p.proxies)),
      limiter_session_(std::move(p.limiter_session)),
      limiter_(limiter_session_ != nullptr ? std::make_unique<ratelimiter::LimiterClient>(limiter_session_.get())
                                           : nullptr),
      envs_(&clock_),
      pool_(config_.warm_pool_size > 0
                ? std::make_unique<WarmPool>(
                      &hosts_, &clock_, config_.warm_pool_size, config_.scheduler_id,
                      [this] { return WarmRoom(hosts_, occupancy_, table_); }, config_.warm_pool_idle)
                : nullptr),
      placer_(&hosts_, pool_.get(), &clock_),
      leases_(&hosts_, &placer_, &clock_, journal_.get(), LeaseOptionsOf(config_, &metrics_),
              [this](size_t leased, int64_t expired) { metrics_.SetLeases(leased, expired); }),
      templates_(&leases_, io_.get_executor(), &clock_, journal_.get()),
      driver_(DriverParts{.executor = io_.get_executor(),
                          .clock = &clock_,
                          .table = &table_,
                          .hosts = &hosts_,
                          .proxies = proxies_,
                          .occupancy = &occupancy_,
                          .limiter = limiter_.get(),
                          .metrics = &metrics_,
                          .pool = pool_.get(),
                          .pauses = &pauses_,
                          .envs = &envs_,
                          .on_finished = [this] { doorbell_.Ring(); }},
              RunnerOptionsOf(config_)),
      scheduler_(io_, &clock_, SchedulerOptionsOf(config_), &table_, &hosts_, &driver_, &doorbell_, &metrics_,
                 pool_.get(), &envs_),
      policy_(io_.get_executor(), &clock_, journal_.get(), proxies_, p.policy, &pauses_,
              [this](int64_t version) {
                table_.SetPolicyVersion(version);  // may admit more groups (max_staleness) or re-queue stale results
                doorbell_.Ring();
              }),
      service_(&scheduler_, &table_, &hosts_, &hub_, &auth_, &policy_, &envs_, &leases_, &templates_,
               io_.get_executor()),
      inspector_(&table_, [this](const std::string& id) { return journal_->AckedResult(id); }) {
  journal_->journal()->OnWriteFailed([this](const absl::Status&) { metrics_.JournalWriteFailed(); });
  table_.Restore(p.snapshot, p.policy.version);
  spdlog::info("journal {}: {} batch(es), {} result(s), {} episode(s) queued, read in {}", config_.journal,
               p.snapshot.batches.size(), p.snapshot.results.size(), table_.QueuedCount(),
               absl::FormatDuration(p.load_time));
  leases_.Restore(p.leases);
  templates_.Restore(std::move(p.templates), std::move(p.template_files));
  CloseLeftoverSessions(p.snapshot);
  journal_->ForgetRuns();
  if (p.policy.sequence > 0) {
    spdlog::info("policy version {}{} (from the journal)", p.policy.version,
                 p.policy.paused ? ", generation paused" : "");
  }
  runner_.AddService(&service_, "corral.v1.Scheduler");
}

void SchedulerRoot::CloseLeftoverSessions(const Snapshot& snapshot) {
  int n = 0;
  for (const auto& run : snapshot.runs) {
    if (!run.running) continue;
    // The session may have been opened before the placement was journaled: its id is known all the same.
    const std::string env_id = EnvId(run.episode_id, run.runs);
    for (const auto& proxy : proxies_) proxy->CloseAsync(env_id);
    ++n;
  }
  if (n > 0) spdlog::info("closing {} proxy session(s) of episodes interrupted by the last shutdown", n);
}

void SchedulerRoot::RetentionLoop() {
  do {
    auto dropped = journal_->DropAckedBefore(absl::Now() - config_.result_retention);
    if (!dropped.ok()) spdlog::warn("result retention: {}", dropped.status());
    if (dropped.ok() && *dropped > 0) spdlog::info("result retention: dropped {} acknowledged result(s)", *dropped);
  } while (!retention_stop_.WaitForNotificationWithTimeout(absl::Minutes(1)));
}

int SchedulerRoot::Run() {
  // The rollout inspector. Task data (prompts, answers, trajectories) only with the cluster token, on every
  // interface: a sandbox with an open network on this machine reaches loopback too. (An --insecure cluster asks
  // for nothing.)
  const bool require_token = !auth_.insecure();
  std::string http_address;
  if (!config_.http_listen.empty()) {
    const std::string host = SplitHostPort(config_.http_listen)->first;  // validated with the config
    http_ = std::make_unique<http::HttpServer>(http::ServerLimits{},
                                               MakeInspectorHandler(&inspector_, &auth_, require_token),
                                               static_cast<int>(config_.http_threads));
    auto port = http_->Listen(config_.http_listen);
    if (!port.ok()) {
      spdlog::error("cannot start the inspector: {}", port.status());
      return 1;
    }
    http_address = JoinHostPort(host, *port);
    runner_.set_extra_ready_address(http_address);
  }
  if (config_.result_retention > absl::ZeroDuration()) retention_ = std::thread([this] { RetentionLoop(); });
  for (int64_t i = 0; i < config_.io_threads; ++i) io_threads_.emplace_back([this] { io_.run(); });
  if (auto s = runner_.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s);
    Shutdown();
    return 1;
  }
  spdlog::info("scheduler '{}': {} static host(s){}, proxies {}, {}", config_.scheduler_id, config_.hosts.size(),
               config_.hosts_dns.empty() ? "" : " + dns " + config_.hosts_dns, absl::StrJoin(config_.proxies, ", "),
               config_.ratelimiter.empty() ? "tools unlimited"
                                           : "tool limit " + config_.tool_limit + " at " + config_.ratelimiter);
  if (http_) {
    spdlog::info("rollout inspector: http://{}/{}", http_address,
                 require_token ? " (with the cluster token: `corral ui` prints a link)" : "");
  }
  scheduler_.Start();
  async::Spawn(io_, policy_.Run(&policy_stopping_, config_.policy_sync_interval), "pushing the policy state");
  async::Spawn(io_, leases_.Run(&policy_stopping_), "expiring sandbox leases");
  runner_.Wait();

  // Shutdown: stop starting episodes; running ones go back to the queue (journaled) and are re-run by the next
  // start; give them a moment to close their sessions and delete their sandboxes.
  policy_stopping_ = true;
  if (http_) http_->Stop();
  scheduler_.Stop();
  for (auto& run : table_.Running("")) run->Stop(StopReason::kRequeue, "the scheduler is shutting down");
  if (!occupancy_.AwaitIdle(absl::Seconds(10))) {
    spdlog::warn("{} episodes had not ended after 10s; the next start runs them again", driver_.running());
  }
  if (pool_) {
    // Warm sandboxes are deleted (a restart's sweep would find them otherwise).
    auto drained = asio::co_spawn(io_, pool_->Drain(), asio::use_future);
    drained.wait_for(std::chrono::seconds(10));
  }
  Shutdown();
  spdlog::info("scheduler stopped");
  return 0;
}

void SchedulerRoot::Shutdown() {
  work_.reset();
  io_.stop();
  for (auto& t : io_threads_) t.join();
  io_threads_.clear();
  retention_stop_.Notify();
  if (retention_.joinable()) retention_.join();
  // The journal flushes what is queued now, while the table its callbacks reach is still alive.
  journal_.reset();
  clock_.Stop();
}

SchedulerRoot::~SchedulerRoot() {
  if (!retention_stop_.HasBeenNotified()) Shutdown();
}

}  // namespace corral::scheduler
