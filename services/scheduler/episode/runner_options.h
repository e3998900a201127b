// The settings the episode path reads, from the scheduler's configuration (config.h fills them).
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "services/scheduler/table/usage_totals.h"

namespace corral::scheduler {

// Per-phase timeouts a task falls back to (PhaseTimeouts in the proto).
struct DefaultTimeouts {
  absl::Duration acquire = absl::Minutes(5);
  absl::Duration setup = absl::Minutes(30);
  absl::Duration agent = absl::Minutes(30);
  absl::Duration tool = absl::Minutes(2);
  absl::Duration verifier = absl::Minutes(10);
  absl::Duration episode = absl::Hours(2);
};

// The settings runners read (from Config).
struct RunnerOptions {
  DefaultTimeouts timeouts;
  int64_t default_max_turns = 10;
  std::string default_model;
  bool capture_token_ids = true;
  std::string scheduler_id = "scheduler";
  std::string tool_limit = "code_exec";
  std::string llm_limit;  // empty: the scheduler's LLM calls are not limited
  absl::Duration llm_call_timeout = absl::Minutes(10);
  PriceTable prices;          // empty: results carry no cost
  bool measure_usage = true;  // read each episode's sandbox's usage as it ends (EpisodeUsage.sandbox)
};

}  // namespace corral::scheduler
