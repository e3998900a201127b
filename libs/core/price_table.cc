#include "libs/core/price_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace corral {
namespace {

absl::StatusOr<double> Price(const YAML::Node& node, const std::string& where) {
  double v = -1;
  if (node.IsScalar()) {
    try {
      v = node.as<double>();
    } catch (const YAML::Exception&) {
      v = -1;
    }
  }
  if (!(v >= 0) || v > 1e12) return absl::InvalidArgumentError(absl::StrCat(where, " must be a number >= 0"));
  return v;
}

}  // namespace

double PriceTable::TokenCost(const std::string& model, uint64_t prompt, uint64_t cached, uint64_t completion) const {
  auto it = models.find(model);
  if (it == models.end()) it = models.find("*");
  if (it == models.end()) return 0;
  const ModelPrice& p = it->second;
  cached = std::min(cached, prompt);
  return (static_cast<double>(prompt - cached) * p.prompt + static_cast<double>(cached) * p.cached.value_or(p.prompt) +
          static_cast<double>(completion) * p.completion) /
         1e6;
}

absl::StatusOr<PriceTable> PriceTableFromYaml(const YAML::Node& node) {
  PriceTable table;
  if (node.IsNull()) return table;
  if (!node.IsMap()) return absl::InvalidArgumentError("prices must be a map (cpu_hour, gib_hour, models)");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (key == "cpu_hour" || key == "gib_hour") {
      absl::StatusOr<double> v = Price(kv.second, "prices." + key);
      if (!v.ok()) return v.status();
      (key == "cpu_hour" ? table.cpu_hour : table.gib_hour) = *v;
    } else if (key == "models") {
      if (!kv.second.IsMap()) return absl::InvalidArgumentError("prices.models must be a map of model: prices");
      for (const auto& m : kv.second) {
        const std::string model = m.first.as<std::string>();
        const std::string where = absl::StrCat("prices.models.", model);
        if (model.empty() || !m.second.IsMap()) {
          return absl::InvalidArgumentError(absl::StrCat(where, " must be a map (prompt, completion, cached)"));
        }
        ModelPrice price;
        for (const auto& field : m.second) {
          const std::string name = field.first.as<std::string>();
          absl::StatusOr<double> v = Price(field.second, absl::StrCat(where, ".", name));
          if (!v.ok()) return v.status();
          if (name == "prompt") {
            price.prompt = *v;
          } else if (name == "completion") {
            price.completion = *v;
          } else if (name == "cached") {
            price.cached = *v;
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": unknown key '", name, "' (prompt, completion, cached: per million tokens)"));
          }
        }
        table.models[model] = price;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("prices: unknown key '", key, "' (cpu_hour, gib_hour, models)"));
    }
  }
  return table;
}

}  // namespace corral
