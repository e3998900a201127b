#include "services/scheduler/config.h"

#include "absl/strings/str_cat.h"
#include "libs/core/host_port.h"
#include "libs/core/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace corral::scheduler {

void RegisterConfig(ConfigSchema& schema, Config* c) {
  c->server.grpc_listen = "127.0.0.1:7700";
  c->server.metrics_listen = "127.0.0.1:9700";
  RegisterServerFlags(schema, &c->server);
  schema.String("scheduler_id", &c->scheduler_id,
                "this scheduler's name in sandbox and session labels (one per scheduler sharing hosts)");
  schema.StringList("host", &c->hosts, "a sandbox host, HOST:PORT (repeatable)");
  schema.String("hosts_dns", &c->hosts_dns,
                "NAME:PORT whose A records are sandbox hosts, re-resolved every dns_interval (headless Service)");
  schema.Duration("dns_interval", &c->dns_interval, "how often hosts_dns is re-resolved", absl::Seconds(1),
                  absl::Hours(1));
  schema.StringList("proxy", &c->proxies, "a proxy replica's gRPC address, HOST:PORT (repeatable; at least one)");
  schema.String("ratelimiter", &c->ratelimiter, "HOST:PORT of corral-ratelimiter; empty = tools run unlimited");
  schema.String("tool_limit", &c->tool_limit,
                "ratelimiter limit each tool execution holds a permit of, keyed by language (code_exec/python)");
  schema.String("llm_limit", &c->llm_limit,
                "ratelimiter limit each LLM call of a single_turn or tool_loop episode holds a permit of, keyed by "
                "model (llm/Qwen3-8B), so a batch cannot overload the inference servers; empty: unlimited. An "
                "agent's own calls go to the proxy directly and are not counted");
  schema.Bool("limiter_fail_open", &c->limiter_fail_open,
              "run tools without a permit while the ratelimiter is unreachable (default: wait, fail closed)");
  schema.String("journal", &c->journal, "SQLite file holding batches, episode states and unacknowledged results");
  schema.Bool("journal_fsync", &c->journal_fsync, "fsync every commit (survive a machine crash, not only a kill)");
  schema.String("http_listen", &c->http_listen,
                "HOST:PORT of the rollout inspector (web page and JSON API; port 0: the kernel chooses; empty: off). "
                "Its data API wants the cluster token on every interface (unless --insecure)");
  schema.Duration("result_retention", &c->result_retention,
                  "how long the journal keeps an acknowledged result for the inspector (0: dropped at the ack)",
                  absl::ZeroDuration(), absl::Hours(24 * 365));
  schema.Int("http_threads", &c->http_threads, "threads serving the inspector", 1, 16);
  schema.Int("io_threads", &c->io_threads, "event-loop threads running episodes", 1, 64);
  schema.Int("max_concurrent_episodes", &c->max_concurrent_episodes, "episodes running at once", 1, 1000000);
  schema.Int("max_pending_episodes", &c->max_pending_episodes,
             "queued + running episodes accepted (Submit beyond: "
             "RESOURCE_EXHAUSTED)",
             1, 100000000);
  schema.Int("max_batch_tasks", &c->max_batch_tasks, "tasks in one batch", 1, 10000000);
  schema.Int("max_group_size", &c->max_group_size, "largest group_size + redundancy", 1, 65536);
  schema.Int("default_max_attempts", &c->default_max_attempts, "attempts per episode for infra failures", 1, 100);
  schema.Duration("retry_backoff", &c->retry.base,
                  "wait before the first retry of an infra failure (doubles per attempt up to retry_backoff_max, "
                  "jittered): the attempts span a service restart",
                  absl::ZeroDuration(), absl::Minutes(10));
  schema.Duration("retry_backoff_max", &c->retry.max, "longest wait before a retry", absl::ZeroDuration(),
                  absl::Hours(1));
  schema.Double("retry_jitter", &c->retry.jitter,
                "each retry's wait is spread over [1-j, 1+j] of it, so episodes failed together come back apart", 0.0,
                1.0);
  schema.Int("default_max_turns", &c->default_max_turns, "LLM calls of a tool_loop conversation", 1, 10000);
  schema.String("default_runner", &c->default_runner, "runner of tasks that name none: single_turn, tool_loop, agent");
  schema.String("default_model", &c->default_model, "model of tasks that name none");
  schema.Bool("capture_token_ids", &c->capture_token_ids,
              "sessions record token ids and logprobs unless a task's policy says otherwise");
  schema.Duration("timeouts.acquire", &c->timeouts.acquire, "dequeue to a ready sandbox", absl::Seconds(1),
                  absl::Hours(24));
  schema.Duration("timeouts.setup", &c->timeouts.setup, "template build and uploads", absl::Seconds(1),
                  absl::Hours(24));
  schema.Duration("timeouts.agent", &c->timeouts.agent, "the agent command, or the whole conversation",
                  absl::Seconds(1), absl::Hours(24));
  schema.Duration("timeouts.tool", &c->timeouts.tool, "one tool execution", absl::Milliseconds(100), absl::Hours(24));
  schema.Duration("timeouts.verifier", &c->timeouts.verifier, "the verifier", absl::Seconds(1), absl::Hours(24));
  schema.Duration("timeouts.episode", &c->timeouts.episode, "a whole episode", absl::Seconds(1), absl::Hours(72));
  schema.Duration("drain_grace", &c->drain_grace, "time running episodes get on Drain", absl::ZeroDuration(),
                  absl::Hours(24));
  schema.Duration("host_poll_interval", &c->host_poll_interval, "HostInfo health checks", absl::Milliseconds(100),
                  absl::Minutes(10));
  schema.Duration("policy_sync_interval", &c->policy_sync_interval,
                  "pushing the policy version and pause state to every proxy replica again", absl::Milliseconds(100),
                  absl::Minutes(10));
  schema.Int("host_unreachable_after", &c->host_unreachable_after,
             "failed health checks in a row before a host's episodes are retried elsewhere", 1, 1000);
  schema.Duration("llm_call_timeout", &c->llm_call_timeout, "one LLM call of single_turn / tool_loop", absl::Seconds(1),
                  absl::Hours(24));
  schema.Bool("measure_usage", &c->measure_usage,
              "read each episode's sandbox's usage as it ends, one GetSandbox with its disk measured (default on; "
              "off: results carry no sandbox usage)");
  schema.Custom("prices", "map", "{}",
                "what usage costs, for EpisodeResult.usage.cost and the batch's and tenant's totals: {cpu_hour: N, "
                "gib_hour: N, models: {MODEL: {prompt: N, completion: N, cached: N}}} (tokens per million; \"*\" "
                "prices the models not listed); empty: no cost",
                [c](const YAML::Node& node) -> absl::Status {
                  CORRAL_ASSIGN_OR_RETURN(c->prices, PriceTableFromYaml(node));
                  return absl::OkStatus();
                });
  schema.Int("warm_pool_size", &c->warm_pool_size,
             "sandboxes kept ready per sandbox spec (template, network, limits) on free capacity (0 = off)", 0, 100000);
  schema.Duration("warm_pool_idle", &c->warm_pool_idle,
                  "a spec no episode asked for this long has its warm sandboxes deleted", absl::Seconds(1),
                  absl::Hours(24));
}

absl::Status ValidateConfig(Config& c) {
  CORRAL_RETURN_IF_ERROR(ValidateServerConfig(c.server));
  if (c.proxies.empty()) return absl::InvalidArgumentError("at least one proxy is required (--proxy HOST:PORT)");
  auto check = [](const char* key, const std::string& address) -> absl::Status {
    if (auto split = SplitHostPort(address); !split.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", split.status().message()));
    }
    return absl::OkStatus();
  };
  for (const auto& h : c.hosts) CORRAL_RETURN_IF_ERROR(check("host", h));
  for (const auto& p : c.proxies) CORRAL_RETURN_IF_ERROR(check("proxy", p));
  if (!c.hosts_dns.empty()) CORRAL_RETURN_IF_ERROR(check("hosts_dns", c.hosts_dns));
  if (!c.ratelimiter.empty()) CORRAL_RETURN_IF_ERROR(check("ratelimiter", c.ratelimiter));
  if (c.default_runner != "single_turn" && c.default_runner != "tool_loop" && c.default_runner != "agent") {
    return absl::InvalidArgumentError("default_runner must be single_turn, tool_loop or agent");
  }
  if (!c.http_listen.empty()) CORRAL_RETURN_IF_ERROR(check("http_listen", c.http_listen));
  if (c.journal.empty()) return absl::InvalidArgumentError("journal must name a file");
  if (c.scheduler_id.empty() || c.scheduler_id.size() > 63) {
    return absl::InvalidArgumentError("scheduler_id must be 1-63 characters");
  }
  return absl::OkStatus();
}

}  // namespace corral::scheduler
