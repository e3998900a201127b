// What `corral eval` reports: per task, the attempts made and passed, and pass@k for each asked k, then the mean
// over tasks — the unbiased estimator of Chen et al. (2021) that Harbor, rLLM and the code-eval suites report:
// pass@k = 1 - C(n - c, k) / C(n, k) for n attempts of which c passed. An attempt passes when it FINISHED with
// a reward at or above the threshold; one that did not finish (infrastructure failure, timeout) is an attempt
// that did not pass, and is counted as an error too.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "corral/v1/scheduler.pb.h"

namespace corral::cli {

// The unbiased pass@k of one task; k above n is taken as n.
double PassAtK(int n, int c, int k);

class EvalTally {
 public:
  explicit EvalTally(double threshold) : threshold_(threshold) {}

  void Add(const v1::EpisodeResult& result);

  struct Task {
    int attempts = 0;
    int passed = 0;
    int errors = 0;
  };
  const std::map<std::string, Task>& tasks() const { return tasks_; }
  // The mean of the tasks' pass@k (0 without tasks).
  double Overall(int k) const;

  // A table: task, attempts, passed, errors, pass@k per k, then the overall line.
  std::string Table(const std::vector<int>& ks) const;
  // {"threshold", "tasks": [{"task", "attempts", "passed", "errors", "pass_at": {"1": x, ...}}], "overall": {...}}
  std::string Json(const std::vector<int>& ks) const;

 private:
  double threshold_;
  std::map<std::string, Task> tasks_;
};

}  // namespace corral::cli
