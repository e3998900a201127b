#include "tools/corral/run_report.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"

namespace corral::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

v1::EpisodeResult Result(const std::string& task, int index, v1::EpisodeStatus status, std::optional<double> reward,
                         absl::Duration total, bool warm = false) {
  v1::EpisodeResult r;
  r.mutable_ids()->set_task_id(task);
  r.mutable_ids()->set_episode_id(absl::StrCat("b:", task, ":e", index));
  r.set_status(status);
  if (reward) r.set_reward(*reward);
  ToProto(total, r.mutable_timings()->mutable_total());
  ToProto(total / 4, r.mutable_timings()->mutable_queue());
  r.set_sandbox_id(absl::StrCat("sb-", index));
  r.set_warm_sandbox(warm);
  if (status != v1::EPISODE_STATUS_FINISHED) r.set_failure_message("verifier crashed");
  return r;
}

v1::Batch Progress(uint32_t total, uint32_t finished, uint32_t failed, uint32_t running, uint32_t queued) {
  v1::Batch b;
  b.set_batch_id("b");
  b.mutable_counts()->set_total(total);
  b.mutable_counts()->set_finished(finished);
  b.mutable_counts()->set_failed(failed);
  b.mutable_counts()->set_running(running);
  b.mutable_counts()->set_queued(queued);
  b.set_progress(static_cast<double>(finished + failed) / total);
  b.set_mean_reward(0.5);
  return b;
}

TEST(RunReportTest, TheLineSaysHowFarHowFastAndWhenItEnds) {
  RunReport report(kStart);
  EXPECT_THAT(report.Line(kStart + absl::Seconds(1), 10), HasSubstr("waiting for the scheduler"));
  report.Add(Result("t1", 0, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(2), /*warm=*/true));
  report.Add(Result("t1", 1, v1::EPISODE_STATUS_FINISHED, 0.0, absl::Seconds(3)));
  report.Progress(Progress(40, 18, 2, 4, 16));
  // 20 ended in 10 s: 2 eps/s, 20 left: ETA 10 s; half the sandboxes were warm.
  EXPECT_EQ(
      report.Line(kStart + absl::Seconds(10), 10),
      "[#####.....] 20/40 ended · 4 running · 16 queued · 2 failed · 2.0 eps/s · reward 0.500 · warm 50% · ETA 10.0s");
  EXPECT_THAT(report.Line(kStart + absl::Seconds(10), 0), Not(HasSubstr("[")));
}

TEST(RunReportTest, TheSummaryHasTheStatusMixRewardsPerTaskPhasesAndTheSlowest) {
  RunReport report(kStart);
  report.Add(Result("easy", 0, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(1)));
  report.Add(Result("easy", 1, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(2)));
  report.Add(Result("hard", 0, v1::EPISODE_STATUS_FINISHED, 0.0, absl::Seconds(4)));
  report.Add(Result("hard", 1, v1::EPISODE_STATUS_FAILED, std::nullopt, absl::Seconds(30)));
  const std::string s = report.Summary(kStart + absl::Seconds(40));
  EXPECT_THAT(s, HasSubstr("4 episode(s) in 40.0s (0.1 eps/s)"));
  EXPECT_THAT(s, HasSubstr("failed 1  finished 3"));
  EXPECT_THAT(s, HasSubstr("easy                            2   1.000   1.00   1.00  |         █|"));
  EXPECT_THAT(s, HasSubstr("hard                            1   0.000   0.00   0.00  |█         |"));
  // p50 of totals {1, 2, 4, 30} is 2 s; the slowest comes first with why it failed.
  EXPECT_THAT(s, HasSubstr("total           4      2.0s     30.0s     30.0s     30.0s"));
  EXPECT_THAT(s, HasSubstr("queue           4"));
  EXPECT_LT(s.find("b:hard:e1"), s.find("b:hard:e0"));
  EXPECT_THAT(s, HasSubstr("verifier crashed"));
  EXPECT_THAT(s, HasSubstr("0 of 4 sandboxes were warm"));
  EXPECT_THAT(s, ::testing::Not(HasSubstr("llm calls"))) << "only the agent's calls: nothing to say";
  // A harness's side calls and a retry are counted: what the trainer's samples leave out.
  v1::EpisodeResult harness = Result("agentic", 0, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(3));
  harness.mutable_trajectory()->mutable_calls_by_role()->set_agent(5);
  harness.mutable_trajectory()->mutable_calls_by_role()->set_auxiliary(2);
  harness.mutable_trajectory()->mutable_calls_by_role()->set_retry(1);
  report.Add(harness);
  EXPECT_THAT(report.Summary(kStart + absl::Seconds(40)), HasSubstr("llm calls     agent 5  auxiliary 2  retry 1"));
}

v1::UsageTotals Usage(uint32_t episodes, double cpu, uint64_t prompt, std::optional<double> cost) {
  v1::UsageTotals u;
  u.set_episodes(episodes);
  u.set_episodes_measured(episodes);
  u.set_cpu_seconds(cpu);
  u.set_memory_gib_seconds(cpu / 2);
  u.set_sandbox_seconds(cpu * 4);
  u.set_prompt_tokens(prompt);
  u.set_completion_tokens(prompt / 10);
  u.set_llm_calls(episodes * 2);
  u.set_tool_calls(episodes);
  if (cost) u.set_cost(*cost);
  return u;
}

TEST(RunReportTest, TheSummarySaysWhatTheBatchCostAndItsMostExpensiveTasks) {
  RunReport report(kStart);
  report.Add(Result("easy", 0, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(1)));
  v1::Batch batch = Progress(4, 4, 0, 0, 0);
  *batch.mutable_usage() = Usage(4, 7200, 1234567, std::nullopt);
  v1::TaskStats* cheap = batch.add_task_stats();
  cheap->set_task_id("cheap");
  *cheap->mutable_usage() = Usage(2, 100, 1000, std::nullopt);
  v1::TaskStats* dear = batch.add_task_stats();
  dear->set_task_id("dear");
  *dear->mutable_usage() = Usage(2, 7100, 1233567, std::nullopt);
  report.Progress(batch);
  std::string s = report.Summary(kStart + absl::Seconds(40));
  EXPECT_THAT(s, HasSubstr("cpu 2.000 h  memory 1.000 GiB·h  sandboxes 8.000 h"));
  EXPECT_THAT(s, HasSubstr("tokens 1,234,567 prompt + 123,456 completion in 8 call(s), 4 tool call(s)"));
  EXPECT_THAT(s, HasSubstr("most expensive tasks (cpu)"));
  EXPECT_LT(s.find("  dear"), s.find("  cheap"));
  EXPECT_THAT(s, Not(HasSubstr("cost")));
  // With a price table the tasks are ranked by cost.
  *batch.mutable_usage() = Usage(4, 7200, 1234567, 2.5);
  *cheap->mutable_usage() = Usage(2, 100, 1000, 2.0);
  *dear->mutable_usage() = Usage(2, 7100, 1233567, 0.5);
  report.Progress(batch);
  s = report.Summary(kStart + absl::Seconds(40));
  EXPECT_THAT(s, HasSubstr("cost 2.5000"));
  EXPECT_THAT(s, HasSubstr("most expensive tasks (cost)"));
  EXPECT_LT(s.find("  cheap"), s.find("  dear"));
  // Without a cgroup the sandboxes are not measured, and the summary says so rather than 0.
  batch.mutable_usage()->set_episodes_measured(0);
  report.Progress(batch);
  EXPECT_THAT(report.Summary(kStart + absl::Seconds(40)), HasSubstr("sandboxes not measured (no cgroup)"));
}

TEST(RunReportTest, DurationsReadLikeAPersonWritesThem) {
  EXPECT_EQ(ShortDuration(absl::Milliseconds(120)), "120ms");
  EXPECT_EQ(ShortDuration(absl::Milliseconds(3250)), "3.2s");
  EXPECT_EQ(ShortDuration(absl::Seconds(65)), "1m05s");
  EXPECT_EQ(ShortDuration(absl::Hours(2) + absl::Minutes(3)), "2h03m");
}

}  // namespace
}  // namespace corral::cli

namespace corral::cli {
namespace {

TEST(RunReportTest, TheSummaryListsEpisodesThatDidNotFinishWithTheEndOfTheirOutput) {
  RunReport report(kStart);
  report.Add(Result("ok", 0, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(1)));
  v1::EpisodeResult failed = Result("broken", 1, v1::EPISODE_STATUS_FAILED, std::nullopt, absl::Seconds(2));
  failed.set_agent_output_tail("starting\nthe harness codex 0.169.0 is not installed here\n\n");
  report.Add(failed);
  const std::string summary = report.Summary(kStart + absl::Seconds(3));
  EXPECT_THAT(summary, HasSubstr("episodes that did not finish (1)\n  b:broken:e1"));
  EXPECT_THAT(summary, HasSubstr("    output: the harness codex 0.169.0 is not installed here\n"));
  EXPECT_THAT(summary, Not(HasSubstr("b:ok:e0                              finished")));
}

TEST(RunReportTest, ResultLinesCarryOutputTailsAsTextNotBase64) {
  v1::EpisodeResult r = Result("t", 0, v1::EPISODE_STATUS_FAILED, std::nullopt, absl::Seconds(1));
  r.set_agent_output_tail("line one\n\"quoted\" \xFF end\n");
  r.set_verifier_output_tail("1 failed: add 2 3 = 6\n");
  const std::string line = ResultJson(r);
  EXPECT_THAT(line, HasSubstr(R"("agent_output_tail":"line one\n\"quoted\" )"
                              "\xEF\xBF\xBD"
                              R"( end\n")"));
  EXPECT_THAT(line, HasSubstr(R"("verifier_output_tail":"1 failed: add 2 3 = 6\n")"));
  EXPECT_THAT(line, HasSubstr(R"("failure_message":"verifier crashed")"));
  EXPECT_EQ(line.find('\n'), std::string::npos);  // one line
  // No tails: no fields, as proto JSON omits empty ones.
  EXPECT_THAT(ResultJson(Result("t", 1, v1::EPISODE_STATUS_FINISHED, 1.0, absl::Seconds(1))),
              Not(HasSubstr("output_tail")));
}

}  // namespace
}  // namespace corral::cli
