// What usage costs: a price per CPU-hour and GiB-hour of a sandbox and per million tokens of each model, from a
// service's config (`prices`), turned into cost where usage is reported. Plain values.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace YAML {
class Node;
}

namespace corral {

// Per million tokens of one model; cached prompt tokens at `cached` (unset: as prompt tokens).
struct ModelPrice {
  double prompt = 0, completion = 0;
  std::optional<double> cached;
};

// `models` by backend model name; "*" prices the models not listed (none: they cost nothing).
struct PriceTable {
  double cpu_hour = 0, gib_hour = 0;
  std::map<std::string, ModelPrice> models;

  bool empty() const { return cpu_hour == 0 && gib_hour == 0 && models.empty(); }
  // A sandbox's CPU and memory over time.
  double SandboxCost(double cpu_seconds, double memory_gib_seconds) const {
    return (cpu_hour * cpu_seconds + gib_hour * memory_gib_seconds) / 3600;
  }
  // Tokens of `model` (cached: how many of the prompt tokens came from a cache).
  double TokenCost(const std::string& model, uint64_t prompt, uint64_t cached, uint64_t completion) const;
};

// {cpu_hour: N, gib_hour: N, models: {NAME: {prompt: N, completion: N, cached: N}}}, every number >= 0.
// INVALID_ARGUMENT naming the key for anything else.
absl::StatusOr<PriceTable> PriceTableFromYaml(const YAML::Node& node);

}  // namespace corral
