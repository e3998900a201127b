// corral-scheduler's configuration: the common server keys, where the other services are (sandbox hosts, proxy
// replicas, the ratelimiter), the journal, admission limits and the defaults tasks fall back to. Every key is
// also a flag (`--help` lists them).
#pragma once

#include <string>
#include <vector>

#include "libs/core/config.h"
#include "libs/rpc/server_config.h"
#include "services/scheduler/episode/runner_options.h"
#include "services/scheduler/table/retry_backoff.h"

namespace corral::scheduler {

struct Config {
  ServerConfig server;
  // Names this scheduler in sandbox labels and proxy session labels, so a restarted scheduler finds (and
  // removes) what its previous run left behind without touching another scheduler's.
  std::string scheduler_id = "scheduler";
  std::vector<std::string> hosts;  // sandbox hosts, HOST:PORT (repeatable)
  std::string hosts_dns;           // NAME:PORT re-resolved every dns_interval (a Kubernetes headless Service)
  absl::Duration dns_interval = absl::Seconds(10);
  std::vector<std::string> proxies;      // proxy replicas' gRPC addresses (repeatable); required
  std::string ratelimiter;               // HOST:PORT; empty = tool executions are not limited
  std::string tool_limit = "code_exec";  // limit name; each tool execution holds one permit keyed by language
  std::string llm_limit;                 // limit name; each LLM call the scheduler makes holds one, keyed by model
  bool limiter_fail_open = false;
  std::string journal = "corral-scheduler.db";
  bool journal_fsync = false;
  // The rollout inspector (web page + JSON API); empty = off. Its API wants the cluster token (unless --insecure).
  std::string http_listen = "127.0.0.1:7780";
  absl::Duration result_retention = absl::Hours(24);  // acknowledged results stay viewable this long
  int64_t http_threads = 1;
  int64_t io_threads = 2;
  int64_t max_concurrent_episodes = 1024;
  int64_t max_pending_episodes = 1000000;
  int64_t max_batch_tasks = 100000;
  int64_t max_group_size = 1024;
  int64_t default_max_attempts = 3;
  RetryBackoff retry;  // retry_backoff, retry_backoff_max, retry_jitter
  int64_t default_max_turns = 10;
  std::string default_runner = "single_turn";
  std::string
      default_model;  // empty: the task's model, else the proxy's (its default_model, or its upstream's only one)
  bool capture_token_ids = true;  // default session policy: record token ids and logprobs for trainers
  DefaultTimeouts timeouts;
  absl::Duration drain_grace = absl::Seconds(60);
  absl::Duration host_poll_interval = absl::Seconds(2);
  // How often the policy version and pause state are pushed to every proxy replica again (a restarted one).
  absl::Duration policy_sync_interval = absl::Seconds(2);
  int64_t host_unreachable_after = 3;  // consecutive failed HostInfo calls before a host counts as lost
  absl::Duration llm_call_timeout = absl::Minutes(10);  // one LLM call of single_turn / tool_loop
  PriceTable prices;
  bool measure_usage = true;
  int64_t warm_pool_size = 0;                         // sandboxes kept ready per sandbox spec (0 = off)
  absl::Duration warm_pool_idle = absl::Seconds(60);  // a spec no episode asked for this long loses its pool
};

void RegisterConfig(ConfigSchema& schema, Config* config);
// Cross-key checks. INVALID_ARGUMENT naming the key.
absl::Status ValidateConfig(Config& config);

}  // namespace corral::scheduler
