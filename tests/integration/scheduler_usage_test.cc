// What episodes cost, end to end: the CPU and memory an agent burns are in its result within 10 %, the token
// counts are the trajectory's own, and the per-tenant counters the scheduler exports add up to its results.
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

constexpr double kMiB = 1 << 20;

// The arithmetic agent, after a Python process that runs 2 s of CPU time holding 256 MiB.
v1::Task Burning(const std::string& id) {
  v1::Task t = Arithmetic(id, 4, 5, v1::RUNNER_AGENT);
  const std::string agent = t.agent().command().argv(2);
  t.mutable_agent()->mutable_command()->set_argv(0, "sh");
  t.mutable_agent()->mutable_command()->set_argv(1, "-c");
  t.mutable_agent()->mutable_command()->set_argv(2, "python3 -c \"$BURN\" && exec python3 -c \"$AGENT\"");
  auto& env = *t.mutable_agent()->mutable_command()->mutable_env();
  env["AGENT"] = agent;
  // It prints the CPU time it used in all (its allocation and start-up included), as the kernel counted it for
  // the process: the figure the sandbox's cgroup must match.
  env["BURN"] =
      "import sys, time\nheld = bytearray(256 << 20)\nwhile time.process_time() < 2.0:\n"
      "  for _ in range(10000): pass\nprint('burned', time.process_time(), file=sys.stderr)\n";
  return t;
}

double Seconds(const google::protobuf::Duration& d) { return absl::ToDoubleSeconds(FromProto(d)); }

// The calls of `r`'s trajectory it made itself, summed.
v1::Usage OwnTokens(const v1::EpisodeResult& r, v1::CallRole role = v1::CALL_ROLE_UNSPECIFIED) {
  v1::Usage sum;
  for (int i = static_cast<int>(r.branch().prefix_calls()); i < r.trajectory().calls_size(); ++i) {
    const v1::LlmCall& c = r.trajectory().calls(i);
    if (role != v1::CALL_ROLE_UNSPECIFIED && c.role() != role) continue;
    sum.set_prompt_tokens(sum.prompt_tokens() + c.usage().prompt_tokens());
    sum.set_completion_tokens(sum.completion_tokens() + c.usage().completion_tokens());
  }
  return sum;
}

TEST_F(SchedulerFixture, WhatAnAgentBurnsIsInItsResultAndTheTokensAreTheTrajectorys) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  v1::BatchSpec spec;
  spec.set_batch_id("burn");
  ASSERT_THAT(Submit(spec, {Burning("burn"), Arithmetic("plain", 4, 5, v1::RUNNER_AGENT)}), IsOk());
  auto results = Results("burn", false, absl::Minutes(3), SIZE_MAX, v1::TRAJECTORY_FORMAT_CALLS);  // every call
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 2u);
  std::map<std::string, v1::EpisodeResult> by_task;
  for (const auto& r : *results) by_task[r.ids().task_id()] = r;
  const v1::EpisodeUsage& burn = by_task["burn"].usage();
  const v1::EpisodeUsage& plain = by_task["plain"].usage();
  for (const v1::EpisodeUsage* u : {&burn, &plain}) {
    ASSERT_TRUE(u->sandbox().has_cpu_time()) << "no cgroup here? " << u->DebugString();
    ASSERT_TRUE(u->sandbox().has_memory_peak_bytes());
    EXPECT_TRUE(u->sandbox().has_own_disk_bytes());
    EXPECT_GT(u->sandbox().processes_started(), 0u);
    EXPECT_TRUE(u->verifier().has_wall_time());
  }
  // What the burn added over the same agent without it: the CPU time it says it used and its 256 MiB, within 10 %.
  const std::string tail = by_task["burn"].agent_output_tail();
  double burned = 0;
  const size_t at = tail.find("burned ");
  ASSERT_NE(at, std::string::npos) << tail;
  ASSERT_TRUE(absl::SimpleAtod(absl::StripAsciiWhitespace(tail.substr(at + 7)), &burned)) << tail;
  ASSERT_GE(burned, 2.0);
  EXPECT_NEAR(Seconds(burn.sandbox().cpu_time()) - Seconds(plain.sandbox().cpu_time()), burned, 0.1 * burned);
  EXPECT_NEAR(static_cast<double>(burn.sandbox().memory_peak_bytes()) -
                  static_cast<double>(plain.sandbox().memory_peak_bytes()),
              256 * kMiB, 25.6 * kMiB);
  // Memory over time comes from readings a second apart: 256 MiB held for about `burned` seconds, give or take a
  // reading.
  EXPECT_GT(burn.sandbox().memory_gib_seconds(), 0.25 * (burned - 1.0));
  EXPECT_LT(burn.sandbox().memory_gib_seconds(), 0.5 * Seconds(burn.sandbox().wall_time()));
  EXPECT_GE(Seconds(burn.sandbox().busy_time()), burned);
  // Tokens: the trajectory's calls, in all and by role; llm_calls counts them for an agent too.
  for (const auto& [task, r] : by_task) {
    SCOPED_TRACE(task);
    const v1::Usage own = OwnTokens(r);
    EXPECT_EQ(r.llm_calls(), 1u);
    EXPECT_EQ(r.usage().model().calls(), 1u);
    EXPECT_GT(own.prompt_tokens(), 0u);
    EXPECT_EQ(r.usage().model().prompt_tokens(), own.prompt_tokens());
    EXPECT_EQ(r.usage().model().completion_tokens(), own.completion_tokens());
    ASSERT_EQ(r.usage().model().by_role_size(), 1);
    const v1::RoleUsage& role = r.usage().model().by_role(0);
    EXPECT_EQ(role.role(), v1::CALL_ROLE_AGENT);
    EXPECT_EQ(role.prompt_tokens(), OwnTokens(r, v1::CALL_ROLE_AGENT).prompt_tokens());
    EXPECT_EQ(role.completion_tokens(), OwnTokens(r, v1::CALL_ROLE_AGENT).completion_tokens());
  }
  auto batch = GetBatch("burn");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->usage().episodes(), 2u);
  EXPECT_EQ(batch->usage().episodes_measured(), 2u);
  EXPECT_NEAR(batch->usage().cpu_seconds(),
              Seconds(burn.sandbox().cpu_time()) + Seconds(plain.sandbox().cpu_time()) +
                  (burn.verifier().in_episode_sandbox() ? 0 : Seconds(burn.verifier().cpu_time())) +
                  (plain.verifier().in_episode_sandbox() ? 0 : Seconds(plain.verifier().cpu_time())),
              1e-6);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, TheTenantsCountersAddUpToItsResults) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 16));
  std::vector<v1::Task> tasks;
  for (int i = 0; i < 25; ++i) tasks.push_back(Arithmetic(absl::StrCat("t", i), i, 2 * i, v1::RUNNER_TOOL_LOOP));
  v1::BatchSpec spec;
  spec.set_batch_id("tenant");
  spec.set_tenant("acme");
  spec.set_group_size(4);
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  auto results = Results("tenant");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 100u);
  double cpu = 0, sandbox_seconds = 0, memory = 0;
  uint64_t calls = 0, prompt = 0, completion = 0, tools = 0;
  for (const auto& r : *results) {
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
    ASSERT_EQ(r.ids().attempt(), 1u);  // a retried attempt would be counted too
    cpu += Seconds(r.usage().sandbox().cpu_time());
    memory += r.usage().sandbox().memory_gib_seconds();
    sandbox_seconds += Seconds(r.usage().sandbox().wall_time());
    calls += r.usage().model().calls();
    prompt += r.usage().model().prompt_tokens();
    completion += r.usage().model().completion_tokens();
    tools += r.usage().tools().calls();
  }
  EXPECT_EQ(calls, 200u);  // a tool call, then the answer
  EXPECT_EQ(tools, 100u);
  auto text = http::HttpGet(scheduler_->ready.metrics, "/metrics");
  ASSERT_THAT(text, IsOk());
  auto metrics = http::ParsePrometheusText(*text);
  ASSERT_THAT(metrics, IsOk());
  const std::map<std::string, std::string> acme = {{"tenant", "acme"}};
  EXPECT_THAT(metrics->Value("corral_usage_episodes_total", acme), IsOkAndHolds(100.0));
  EXPECT_THAT(metrics->Value("corral_usage_llm_calls_total", acme), IsOkAndHolds(static_cast<double>(calls)));
  EXPECT_THAT(metrics->Value("corral_usage_tool_calls_total", acme), IsOkAndHolds(static_cast<double>(tools)));
  EXPECT_THAT(metrics->Value("corral_usage_tokens_total", {{"tenant", "acme"}, {"kind", "prompt"}}),
              IsOkAndHolds(static_cast<double>(prompt)));
  EXPECT_THAT(metrics->Value("corral_usage_tokens_total", {{"tenant", "acme"}, {"kind", "completion"}}),
              IsOkAndHolds(static_cast<double>(completion)));
  auto near = [](double want) { return ::testing::DoubleNear(want, 1e-6 * std::max(1.0, want)); };
  EXPECT_THAT(metrics->Value("corral_usage_cpu_seconds_total", acme), IsOkAndHolds(near(cpu)));
  EXPECT_THAT(metrics->Value("corral_usage_memory_gib_seconds_total", acme), IsOkAndHolds(near(memory)));
  EXPECT_THAT(metrics->Value("corral_usage_sandbox_seconds_total", acme), IsOkAndHolds(near(sandbox_seconds)));
  EXPECT_GT(cpu, 0);
  // The batch's totals say the same.
  auto batch = GetBatch("tenant");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->spec().tenant(), "acme");
  EXPECT_EQ(batch->usage().episodes(), 100u);
  EXPECT_EQ(batch->usage().llm_calls(), calls);
  EXPECT_EQ(batch->usage().prompt_tokens(), prompt);
  EXPECT_NEAR(batch->usage().cpu_seconds(), cpu, 1e-6 * std::max(1.0, cpu));
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral
