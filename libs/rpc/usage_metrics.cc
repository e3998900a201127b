#include "libs/rpc/usage_metrics.h"

namespace corral {
namespace {

prometheus::Family<prometheus::Counter>& Family(prometheus::Registry& r, const std::string& name,
                                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

}  // namespace

UsageMetrics::UsageMetrics(prometheus::Registry& r, size_t max_tenants)
    : max_tenants_(max_tenants),
      episodes_(Family(r, "corral_usage_episodes_total",
                       "Episodes (the sandbox API: sandboxes and runs) whose usage was counted, by tenant")),
      cpu_(Family(r, "corral_usage_cpu_seconds_total", "CPU time of their sandboxes, by tenant")),
      memory_(Family(r, "corral_usage_memory_gib_seconds_total",
                     "Memory their sandboxes held over time (GiB x seconds), by tenant")),
      sandbox_(Family(r, "corral_usage_sandbox_seconds_total", "Time their sandboxes existed, by tenant")),
      llm_calls_(Family(r, "corral_usage_llm_calls_total", "Model calls, by tenant")),
      tokens_(Family(r, "corral_usage_tokens_total",
                     "Model tokens by tenant and kind (prompt, completion, cached: prompt tokens from a cache)")),
      tools_(Family(r, "corral_usage_tool_calls_total", "Tool calls the cluster ran, by tenant")),
      cost_(Family(r, "corral_usage_cost_total", "Cost by the price table (in its currency), by tenant")) {}

UsageMetrics::Counters& UsageMetrics::For(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return it->second;
  if (tenants_.size() >= max_tenants_ && tenant != "other") return For("other");
  const std::map<std::string, std::string> labels = {{"tenant", tenant}};
  auto with = [&](const char* kind) {
    std::map<std::string, std::string> l = labels;
    l["kind"] = kind;
    return &tokens_.Add(l);
  };
  Counters c{&episodes_.Add(labels),  &cpu_.Add(labels), &memory_.Add(labels), &sandbox_.Add(labels),
             &llm_calls_.Add(labels), with("prompt"),    with("completion"),   with("cached"),
             &tools_.Add(labels),     &cost_.Add(labels)};
  return tenants_.emplace(tenant, c).first->second;
}

void UsageMetrics::Add(const std::string& tenant, const UsageTotals& u) {
  absl::MutexLock lock(&mu_);
  Counters& c = For(tenant);
  c.episodes->Increment(u.episodes);
  c.cpu->Increment(u.cpu_seconds);
  c.memory->Increment(u.memory_gib_seconds);
  c.sandbox->Increment(u.sandbox_seconds);
  c.llm_calls->Increment(static_cast<double>(u.llm_calls));
  c.prompt->Increment(static_cast<double>(u.prompt_tokens));
  c.completion->Increment(static_cast<double>(u.completion_tokens));
  c.cached->Increment(static_cast<double>(u.cached_prompt_tokens));
  c.tools->Increment(static_cast<double>(u.tool_calls));
  c.cost->Increment(u.cost);
}

}  // namespace corral
