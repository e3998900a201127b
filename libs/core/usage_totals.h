// What some episodes or sandboxes cost, summed: one shape for every place that adds usage up (a batch's and a
// task's totals in the scheduler, the per-tenant counters of the scheduler and the sandbox API). Plain values.
#pragma once

#include <cstdint>

namespace corral {

struct UsageTotals {
  uint32_t episodes = 0;  // episodes, or sandboxes and calls of a sandbox API
  uint32_t measured = 0;  // of those, the ones whose CPU and memory were measured
  double cpu_seconds = 0, memory_gib_seconds = 0, sandbox_seconds = 0;
  uint64_t llm_calls = 0, prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0, tool_calls = 0;
  double cost = 0;
  uint32_t priced = 0;  // of those, the ones that had a cost

  UsageTotals& operator+=(const UsageTotals& o) {
    episodes += o.episodes;
    measured += o.measured;
    cpu_seconds += o.cpu_seconds;
    memory_gib_seconds += o.memory_gib_seconds;
    sandbox_seconds += o.sandbox_seconds;
    llm_calls += o.llm_calls;
    prompt_tokens += o.prompt_tokens;
    completion_tokens += o.completion_tokens;
    cached_prompt_tokens += o.cached_prompt_tokens;
    tool_calls += o.tool_calls;
    cost += o.cost;
    priced += o.priced;
    return *this;
  }
  UsageTotals& operator-=(const UsageTotals& o) {
    episodes -= o.episodes;
    measured -= o.measured;
    cpu_seconds -= o.cpu_seconds;
    memory_gib_seconds -= o.memory_gib_seconds;
    sandbox_seconds -= o.sandbox_seconds;
    llm_calls -= o.llm_calls;
    prompt_tokens -= o.prompt_tokens;
    completion_tokens -= o.completion_tokens;
    cached_prompt_tokens -= o.cached_prompt_tokens;
    tool_calls -= o.tool_calls;
    cost -= o.cost;
    priced -= o.priced;
    return *this;
  }
};

}  // namespace corral
