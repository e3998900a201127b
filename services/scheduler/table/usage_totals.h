// What an episode cost as the totals count it (Batch.usage, TaskStats.usage, the per-tenant metrics), and what a
// price table makes of its usage. Pure.
#pragma once

#include <cstdint>
#include <optional>

#include "corral/v1/scheduler.pb.h"
#include "libs/core/price_table.h"
#include "libs/core/usage_totals.h"

namespace corral::scheduler {

// What `usage` costs by `prices`: its own sandbox and model calls (the shared prefix is its ancestors'), and its
// verifier's CPU when that ran in a sandbox of its own. nullopt for an empty table.
std::optional<double> CostOf(const v1::EpisodeUsage& usage, const PriceTable& prices);

// One episode's own usage, summed as UsageTotals (its verifier's CPU outside its sandbox included).
UsageTotals UsageTotalsOf(const v1::EpisodeUsage& usage);
// One sandbox's (a leased sandbox of a sandbox API, once deleted), as one "episode", priced by `prices`.
UsageTotals SandboxUsageTotals(const v1::ResourceUsage& usage, const PriceTable& prices);
void UsageTotalsToProto(const UsageTotals& totals, v1::UsageTotals* out);

}  // namespace corral::scheduler
