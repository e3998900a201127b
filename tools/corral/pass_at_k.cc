#include "tools/corral/pass_at_k.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/json.hpp"

namespace corral::cli {

namespace json = boost::json;

double PassAtK(int n, int c, int k) {
  if (n <= 0) return 0;
  k = std::clamp(k, 1, n);
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i), computed without large binomials.
  double fail = 1.0;
  for (int i = n - c + 1; i <= n; ++i) fail *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - fail;
}

void EvalTally::Add(const v1::EpisodeResult& r) {
  Task& t = tasks_[r.ids().task_id()];
  ++t.attempts;
  if (r.status() != v1::EPISODE_STATUS_FINISHED) {
    ++t.errors;
  } else if (r.reward() >= threshold_) {
    ++t.passed;
  }
}

double EvalTally::Overall(int k) const {
  if (tasks_.empty()) return 0;
  double sum = 0;
  for (const auto& [id, t] : tasks_) sum += PassAtK(t.attempts, t.passed, k);
  return sum / static_cast<double>(tasks_.size());
}

std::string EvalTally::Table(const std::vector<int>& ks) const {
  const std::string overall = absl::StrCat("overall (", tasks_.size(), tasks_.size() == 1 ? " task)" : " tasks)");
  size_t width = overall.size();
  for (const auto& [id, t] : tasks_) width = std::max(width, id.size());
  const int w = static_cast<int>(width);
  std::string out = absl::StrFormat("%-*s %8s %6s %6s", w, "task", "attempts", "passed", "errors");
  for (int k : ks) absl::StrAppend(&out, absl::StrFormat(" %8s", absl::StrCat("pass@", k)));
  absl::StrAppend(&out, "\n");
  int attempts = 0, passed = 0, errors = 0;
  for (const auto& [id, t] : tasks_) {
    absl::StrAppend(&out, absl::StrFormat("%-*s %8d %6d %6d", w, id, t.attempts, t.passed, t.errors));
    for (int k : ks) absl::StrAppend(&out, absl::StrFormat(" %8.3f", PassAtK(t.attempts, t.passed, k)));
    absl::StrAppend(&out, "\n");
    attempts += t.attempts;
    passed += t.passed;
    errors += t.errors;
  }
  absl::StrAppend(&out, absl::StrFormat("%-*s %8d %6d %6d", w, overall, attempts, passed, errors));
  for (int k : ks) absl::StrAppend(&out, absl::StrFormat(" %8.3f", Overall(k)));
  absl::StrAppend(&out, "\n");
  return out;
}

std::string EvalTally::Json(const std::vector<int>& ks) const {
  auto pass_at = [&](const std::function<double(int)>& f) {
    json::object o;
    for (int k : ks) o[std::to_string(k)] = f(k);
    return o;
  };
  json::array tasks;
  for (const auto& [id, t] : tasks_) {
    json::object o;
    o["task"] = id;
    o["attempts"] = t.attempts;
    o["passed"] = t.passed;
    o["errors"] = t.errors;
    o["pass_at"] = pass_at([&](int k) { return PassAtK(t.attempts, t.passed, k); });
    tasks.push_back(std::move(o));
  }
  json::object out;
  out["threshold"] = threshold_;
  out["tasks"] = std::move(tasks);
  out["overall"] = pass_at([&](int k) { return Overall(k); });
  return json::serialize(out);
}

}  // namespace corral::cli
