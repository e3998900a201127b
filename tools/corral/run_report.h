// What `corral run` shows: a live progress line while a batch runs, and a summary once it ends — status mix,
// reward per task (mean and distribution), phase latency percentiles, the slowest episodes, and what the batch
// cost (the scheduler's totals, and its most expensive tasks when the last Progress has task_stats). Plain logic over
// the result stream's messages; the caller decides where and how often to print.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "corral/v1/scheduler.pb.h"

namespace corral::cli {

class RunReport {
 public:
  explicit RunReport(absl::Time start) : start_(start) {}

  void Add(const v1::EpisodeResult& result);
  void Progress(const v1::Batch& batch) { batch_ = batch; }

  // One line: bar, ended/total, running, queued, failed, episodes/s, mean reward, warm-pool hits, ETA. `bar`
  // is the bar's width in characters (0: none).
  std::string Line(absl::Time now, int bar) const;
  // The report printed when the batch has ended (or was interrupted).
  std::string Summary(absl::Time now) const;

 private:
  struct Episode {
    std::string id, task;
    v1::EpisodeStatus status;
    std::optional<double> reward;
    absl::Duration total;
    std::string failure;
    std::string output;  // the last line of the verifier's output, else of the agent's
  };
  double EndedPerSecond(absl::Time now) const;

  absl::Time start_;
  std::optional<v1::Batch> batch_;
  std::vector<Episode> episodes_;
  std::map<std::string, std::vector<absl::Duration>> phases_;  // by phase name
  int with_sandbox_ = 0, warm_ = 0;
  v1::RoleCounts roles_;  // the episodes' LLM calls by role (Trajectory.calls_by_role), summed
};

// Episodes that ended, whatever their status.
inline uint32_t EndedEpisodes(const v1::EpisodeCounts& c) {
  return c.finished() + c.failed() + c.timeout() + c.cancelled() + c.no_data() + c.filtered();
}

// One result as a JSON line (proto field names) for `--out` files: the agent's and the verifier's output tails as
// text (invalid UTF-8 replaced), not the base64 that proto JSON gives bytes, since people read them.
std::string ResultJson(const v1::EpisodeResult& result);

// "1m05s", "3.2s", "120ms": durations as a person reads them in a table.
std::string ShortDuration(absl::Duration d);

}  // namespace corral::cli
