#include "services/scheduler/table/usage_totals.h"

#include "libs/api/proto_time.h"

namespace corral::scheduler {
namespace {

double Seconds(const google::protobuf::Duration& d) { return absl::ToDoubleSeconds(FromProto(d)); }

// The verifier's CPU outside the episode's sandbox (SEPARATE_UID: a fork of its own).
double OwnVerifierSeconds(const v1::VerifierUsage& v) {
  return v.has_cpu_time() && !v.in_episode_sandbox() ? Seconds(v.cpu_time()) : 0;
}

}  // namespace

std::optional<double> CostOf(const v1::EpisodeUsage& usage, const PriceTable& prices) {
  if (prices.empty()) return std::nullopt;
  const v1::ResourceUsage& sb = usage.sandbox();
  const double cpu = (sb.has_cpu_time() ? Seconds(sb.cpu_time()) : 0) + OwnVerifierSeconds(usage.verifier());
  double cost = prices.SandboxCost(cpu, sb.has_memory_gib_seconds() ? sb.memory_gib_seconds() : 0);
  for (const v1::NamedModelUsage& m : usage.model().by_model()) {
    cost += prices.TokenCost(m.model(), m.prompt_tokens(), m.cached_prompt_tokens(), m.completion_tokens());
  }
  return cost;
}

namespace {

// The sandbox's part of a total: CPU, memory over time and wall time where they were measured.
void AddSandbox(const v1::ResourceUsage& sb, double extra_cpu_seconds, UsageTotals& t) {
  if (sb.has_cpu_time() && sb.has_memory_gib_seconds()) {
    t.measured = 1;
    t.cpu_seconds = Seconds(sb.cpu_time()) + extra_cpu_seconds;
    t.memory_gib_seconds = sb.memory_gib_seconds();
  }
  if (sb.has_wall_time()) t.sandbox_seconds = Seconds(sb.wall_time());
}

}  // namespace

UsageTotals UsageTotalsOf(const v1::EpisodeUsage& usage) {
  UsageTotals t;
  t.episodes = 1;
  AddSandbox(usage.sandbox(), OwnVerifierSeconds(usage.verifier()), t);
  t.llm_calls = usage.model().calls();
  t.prompt_tokens = usage.model().prompt_tokens();
  t.completion_tokens = usage.model().completion_tokens();
  t.cached_prompt_tokens = usage.model().cached_prompt_tokens();
  t.tool_calls = usage.tools().calls();
  if (usage.has_cost()) {
    t.cost = usage.cost();
    t.priced = 1;
  }
  return t;
}

UsageTotals SandboxUsageTotals(const v1::ResourceUsage& usage, const PriceTable& prices) {
  UsageTotals t;
  t.episodes = 1;
  AddSandbox(usage, 0, t);
  if (!prices.empty()) {
    t.cost = prices.SandboxCost(t.cpu_seconds, t.memory_gib_seconds);
    t.priced = 1;
  }
  return t;
}

void UsageTotalsToProto(const UsageTotals& t, v1::UsageTotals* out) {
  out->set_episodes(t.episodes);
  out->set_episodes_measured(t.measured);
  out->set_cpu_seconds(t.cpu_seconds);
  out->set_memory_gib_seconds(t.memory_gib_seconds);
  out->set_sandbox_seconds(t.sandbox_seconds);
  out->set_llm_calls(t.llm_calls);
  out->set_prompt_tokens(t.prompt_tokens);
  out->set_completion_tokens(t.completion_tokens);
  out->set_cached_prompt_tokens(t.cached_prompt_tokens);
  out->set_tool_calls(t.tool_calls);
  if (t.priced > 0) out->set_cost(t.cost);
}

}  // namespace corral::scheduler
