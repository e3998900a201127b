#include "tools/corral/run_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "libs/core/utf8.h"
#include "tools/corral/output.h"

namespace corral::cli {
namespace {

const char* StatusName(v1::EpisodeStatus s) {
  switch (s) {
    case v1::EPISODE_STATUS_FINISHED: return "finished";
    case v1::EPISODE_STATUS_FAILED: return "failed";
    case v1::EPISODE_STATUS_TIMEOUT: return "timeout";
    case v1::EPISODE_STATUS_CANCELLED: return "cancelled";
    case v1::EPISODE_STATUS_NO_DATA: return "no_data";
    case v1::EPISODE_STATUS_FILTERED: return "filtered";
    default: return "unknown";
  }
}

absl::Duration Percentile(std::vector<absl::Duration> v, double q) {
  if (v.empty()) return absl::ZeroDuration();
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// Ten buckets over [lo, hi] drawn with block characters, so a reward distribution reads at a glance.
std::string Sparkline(const std::vector<double>& values, double lo, double hi) {
  static const char* const kBlocks[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  constexpr int kBuckets = 10;
  int counts[kBuckets] = {};
  for (double v : values) {
    int b = hi > lo ? static_cast<int>((v - lo) / (hi - lo) * kBuckets) : 0;
    counts[std::clamp(b, 0, kBuckets - 1)]++;
  }
  const int most = *std::max_element(counts, counts + kBuckets);
  std::string out;
  for (int c : counts) out += kBlocks[most == 0 || c == 0 ? 0 : 1 + (c * 7 + most - 1) / most];
  return out;
}

// "1,234,567".
std::string Thousands(uint64_t n) {
  std::string digits = absl::StrCat(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The batch's usage (Batch.usage), then its most expensive tasks (by cost with a price table, else CPU time).
std::string UsageSummary(const v1::Batch& batch) {
  const v1::UsageTotals& u = batch.usage();
  if (u.episodes() == 0) return "";
  std::string out = "\nusage      ";
  if (u.episodes_measured() > 0) {
    absl::StrAppendFormat(&out, "  cpu %.3f h  memory %.3f GiB·h  sandboxes %.3f h", u.cpu_seconds() / 3600,
                          u.memory_gib_seconds() / 3600, u.sandbox_seconds() / 3600);
    if (u.episodes_measured() < u.episodes()) {
      absl::StrAppendFormat(&out, " (%d of %d measured)", u.episodes_measured(), u.episodes());
    }
  } else {
    absl::StrAppend(&out, "  sandboxes not measured (no cgroup)");
  }
  absl::StrAppend(&out, "\n             tokens ", Thousands(u.prompt_tokens()), " prompt");
  if (u.cached_prompt_tokens() > 0) absl::StrAppend(&out, " (", Thousands(u.cached_prompt_tokens()), " cached)");
  absl::StrAppend(&out, " + ", Thousands(u.completion_tokens()), " completion in ", Thousands(u.llm_calls()),
                  " call(s), ", Thousands(u.tool_calls()), " tool call(s)");
  if (u.has_cost()) absl::StrAppendFormat(&out, "  cost %.4f", u.cost());
  std::vector<const v1::TaskStats*> tasks;
  for (const v1::TaskStats& t : batch.task_stats()) {
    if (t.usage().episodes() > 0) tasks.push_back(&t);
  }
  const bool by_cost = u.has_cost();
  auto key = [by_cost](const v1::TaskStats* t) { return by_cost ? t->usage().cost() : t->usage().cpu_seconds(); };
  std::sort(tasks.begin(), tasks.end(),
            [&](const v1::TaskStats* a, const v1::TaskStats* b) { return key(a) > key(b); });
  if (tasks.size() > 5) tasks.resize(5);
  if (tasks.size() > 1) {
    absl::StrAppendFormat(&out, "\nmost expensive tasks (%s)\n", by_cost ? "cost" : "cpu");
    for (const v1::TaskStats* t : tasks) {
      absl::StrAppendFormat(&out, "  %-28s %4d  cpu %8.1fs  %10s tokens", t->task_id().substr(0, 28),
                            t->usage().episodes(), t->usage().cpu_seconds(),
                            Thousands(t->usage().prompt_tokens() + t->usage().completion_tokens()));
      if (t->usage().has_cost()) absl::StrAppendFormat(&out, "  cost %.4f", t->usage().cost());
      absl::StrAppend(&out, "\n");
    }
  } else {
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace

std::string ShortDuration(absl::Duration d) {
  if (d < absl::Seconds(1)) return absl::StrFormat("%dms", absl::ToInt64Milliseconds(d));
  if (d < absl::Minutes(1)) return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
}

void RunReport::Add(const v1::EpisodeResult& r) {
  Episode e{r.ids().episode_id(),           r.ids().task_id(),   r.status(), std::nullopt,
            FromProto(r.timings().total()), r.failure_message(), ""};
  for (const std::string* tail : {&r.verifier_output_tail(), &r.agent_output_tail()}) {
    if (e.output.empty()) e.output = LastLine(ToValidUtf8(*tail), 100);
  }
  if (r.has_reward()) e.reward = r.reward();
  const v1::PhaseTimings& t = r.timings();
  const std::pair<const char*, const google::protobuf::Duration*> phases[] = {
      {"queue", &t.queue()}, {"acquire", &t.sandbox_acquire()}, {"setup", &t.setup()}, {"agent", &t.agent()},
      {"tools", &t.tools()}, {"verifier", &t.verifier()},       {"total", &t.total()}};
  for (const auto& [name, d] : phases) {
    const absl::Duration v = FromProto(*d);
    if (v > absl::ZeroDuration() || std::string(name) == "total") phases_[name].push_back(v);
  }
  if (!r.sandbox_id().empty()) {
    ++with_sandbox_;
    warm_ += r.warm_sandbox() ? 1 : 0;
  }
  const v1::RoleCounts& roles = r.trajectory().calls_by_role();
  roles_.set_agent(roles_.agent() + roles.agent());
  roles_.set_auxiliary(roles_.auxiliary() + roles.auxiliary());
  roles_.set_retry(roles_.retry() + roles.retry());
  roles_.set_compaction(roles_.compaction() + roles.compaction());
  roles_.set_subagent(roles_.subagent() + roles.subagent());
  episodes_.push_back(std::move(e));
}

double RunReport::EndedPerSecond(absl::Time now) const {
  const double elapsed = absl::ToDoubleSeconds(now - start_);
  if (!batch_ || elapsed <= 0) return 0;
  return EndedEpisodes(batch_->counts()) / elapsed;
}

std::string RunReport::Line(absl::Time now, int bar) const {
  if (!batch_) return absl::StrCat("waiting for the scheduler… ", ShortDuration(now - start_));
  const v1::EpisodeCounts& c = batch_->counts();
  const uint32_t ended = EndedEpisodes(c);
  std::string out;
  if (bar > 0) {
    const int filled = static_cast<int>(batch_->progress() * bar);
    out = absl::StrCat("[", std::string(filled, '#'), std::string(bar - filled, '.'), "] ");
  }
  absl::StrAppendFormat(&out, "%d/%d ended · %d running · %d queued", ended, c.total(), c.running(), c.queued());
  if (const uint32_t bad = c.failed() + c.timeout(); bad > 0) absl::StrAppendFormat(&out, " · %d failed", bad);
  const double rate = EndedPerSecond(now);
  absl::StrAppendFormat(&out, " · %.1f eps/s", rate);
  if (batch_->has_mean_reward()) absl::StrAppendFormat(&out, " · reward %.3f", batch_->mean_reward());
  if (with_sandbox_ > 0) absl::StrAppendFormat(&out, " · warm %d%%", 100 * warm_ / with_sandbox_);
  if (rate > 0 && ended < c.total()) {
    absl::StrAppend(&out, " · ETA ", ShortDuration(absl::Seconds((c.total() - ended) / rate)));
  }
  return out;
}

std::string RunReport::Summary(absl::Time now) const {
  std::string out;
  const double seconds = absl::ToDoubleSeconds(now - start_);
  std::map<std::string, int> by_status;
  for (const Episode& e : episodes_) by_status[StatusName(e.status)]++;
  absl::StrAppendFormat(&out, "%d episode(s) in %s (%.1f eps/s)", episodes_.size(), ShortDuration(now - start_),
                        seconds > 0 ? episodes_.size() / seconds : 0.0);
  if (batch_) {
    absl::StrAppend(&out, ", batch ", batch_->batch_id(),
                    batch_->state() == v1::BATCH_STATE_CANCELLED ? " (cancelled)" : "");
  }
  absl::StrAppend(&out, "\n\nstatus     ");
  for (const auto& [name, n] : by_status) absl::StrAppendFormat(&out, "  %s %d", name, n);
  if (with_sandbox_ > 0)
    absl::StrAppendFormat(&out, "\nwarm pool    %d of %d sandboxes were warm", warm_, with_sandbox_);
  // The calls a trainer's samples leave out (a harness's side calls, retries), when there were any.
  if (roles_.auxiliary() + roles_.retry() + roles_.compaction() + roles_.subagent() > 0) {
    absl::StrAppend(&out, "\nllm calls   ");
    const std::pair<const char*, uint32_t> by_role[] = {{"agent", roles_.agent()},
                                                        {"auxiliary", roles_.auxiliary()},
                                                        {"retry", roles_.retry()},
                                                        {"compaction", roles_.compaction()},
                                                        {"subagent", roles_.subagent()}};
    for (const auto& [name, n] : by_role) {
      if (n > 0) absl::StrAppendFormat(&out, "  %s %d", name, n);
    }
  }

  std::map<std::string, std::vector<double>> rewards_by_task;
  for (const Episode& e : episodes_) {
    if (e.reward) rewards_by_task[e.task].push_back(*e.reward);
  }
  if (!rewards_by_task.empty()) {
    double lo = 0, hi = 1;
    for (const auto& [task, v] : rewards_by_task) {
      lo = std::min(lo, *std::min_element(v.begin(), v.end()));
      hi = std::max(hi, *std::max_element(v.begin(), v.end()));
    }
    absl::StrAppendFormat(&out, "\n\n%-28s %4s %7s %6s %6s  distribution [%g, %g]\n", "task", "n", "mean", "min", "max",
                          lo, hi);
    for (const auto& [task, v] : rewards_by_task) {
      double sum = 0;
      for (double x : v) sum += x;
      absl::StrAppendFormat(&out, "%-28s %4d %7.3f %6.2f %6.2f  |%s|\n", task.substr(0, 28), v.size(),
                            sum / static_cast<double>(v.size()), *std::min_element(v.begin(), v.end()),
                            *std::max_element(v.begin(), v.end()), Sparkline(v, lo, hi));
    }
  }

  if (!phases_.empty()) {
    absl::StrAppendFormat(&out, "\n%-10s %6s %9s %9s %9s %9s\n", "phase", "n", "p50", "p90", "p99", "max");
    for (const char* name : {"queue", "acquire", "setup", "agent", "tools", "verifier", "total"}) {
      auto it = phases_.find(name);
      if (it == phases_.end() || it->second.empty()) continue;
      const auto& v = it->second;
      absl::StrAppendFormat(&out, "%-10s %6d %9s %9s %9s %9s\n", name, v.size(), ShortDuration(Percentile(v, 0.5)),
                            ShortDuration(Percentile(v, 0.9)), ShortDuration(Percentile(v, 0.99)),
                            ShortDuration(Percentile(v, 1.0)));
    }
  }

  if (batch_) absl::StrAppend(&out, UsageSummary(*batch_));

  std::vector<const Episode*> slowest;
  for (const Episode& e : episodes_) slowest.push_back(&e);
  std::sort(slowest.begin(), slowest.end(), [](const Episode* a, const Episode* b) { return a->total > b->total; });
  if (slowest.size() > 5) slowest.resize(5);
  if (!slowest.empty()) {
    absl::StrAppend(&out, "\nslowest episodes\n");
    for (const Episode* e : slowest) {
      absl::StrAppendFormat(&out, "  %-36s %9s  %-9s %s\n", e->id, ShortDuration(e->total), StatusName(e->status),
                            e->reward ? absl::StrFormat("reward %.3f", *e->reward) : e->failure.substr(0, 60));
    }
  }
  // Why episodes failed, with the end of what they printed: what a person debugging the batch reads first.
  std::vector<const Episode*> failed;
  for (const Episode& e : episodes_) {
    if (e.status != v1::EPISODE_STATUS_FINISHED && e.status != v1::EPISODE_STATUS_FILTERED) failed.push_back(&e);
  }
  if (!failed.empty()) {
    absl::StrAppendFormat(&out, "\nepisodes that did not finish (%d%s)\n", failed.size(),
                          failed.size() > 5 ? ", the first 5" : "");
    if (failed.size() > 5) failed.resize(5);
    for (const Episode* e : failed) {
      absl::StrAppendFormat(&out, "  %-36s %-9s %s\n", e->id, StatusName(e->status), e->failure.substr(0, 120));
      if (!e->output.empty()) absl::StrAppend(&out, "    output: ", e->output, "\n");
    }
  }
  return out;
}

std::string ResultJson(const v1::EpisodeResult& result) {
  v1::EpisodeResult bare = result;
  bare.clear_agent_output_tail();
  bare.clear_verifier_output_tail();
  boost::system::error_code ec;
  boost::json::value json = boost::json::parse(ToJson(bare, false), ec);
  if (ec || !json.is_object()) return ToJson(result, false);  // not expected: the printer writes an object
  boost::json::object& o = json.as_object();
  if (!result.agent_output_tail().empty()) o["agent_output_tail"] = ToValidUtf8(result.agent_output_tail());
  if (!result.verifier_output_tail().empty()) {
    o["verifier_output_tail"] = ToValidUtf8(result.verifier_output_tail());
  }
  return boost::json::serialize(json);
}

}  // namespace corral::cli
