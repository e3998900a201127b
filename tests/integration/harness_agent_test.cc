// Installed agent harnesses run by the scheduler's agent runner (AgentSpec.harness) in real sandboxes: each of
// Claude Code, Codex CLI, OpenCode, Gemini CLI, Qwen Code, pi and Cline, installed on the host with `corral harness
// install` (npm, pinned versions), works a task through the episode's proxy session (proxy_only network) while
// corral-fake-llm plays a model that calls the harness's own shell tool; a verifier checks the file the command wrote
// (reward 1). The same task whose model only claims the work is done gets reward 0. The example Harbor tasks, through
// `corral run`, get reward 1 with their reference solution and 0 without. The harnesses are found where the host
// installed them (its harness root, which it gives every sandbox).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/harness/harnesses.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

// Kept between runs (installing is idempotent), outside the checkout, under /opt where sandboxes may run programs.
constexpr char kHarnessRoot[] = "/opt/corral-tests/harnesses";

class HarnessAgentTest : public SchedulerFixture {
 protected:
  void SetUp() override { Start({"--shell-agent"}); }

  // Installs every harness and starts a cluster whose model plays with `fake_llm_args`.
  void Start(std::vector<std::string> fake_llm_args) {
    SchedulerFixture::SetUp();
    if (IsSkipped()) return;
    // Each test is a process of its own (ctest runs them side by side): the install takes a lock, and the ones
    // after the first find the harnesses installed.
    auto install = testing::Subprocess::Start({CORRAL_CLI, "harness", "--root", kHarnessRoot, "install", "all"},
                                              dir_ + "/harness-install.log");
    ASSERT_THAT(install, IsOk());
    auto status = install->Wait(absl::Minutes(10));
    ASSERT_THAT(status, IsOk());
    ASSERT_EQ(*status, 0) << install->Log();
    fake_llm_args_ = std::move(fake_llm_args);
    harness_root_ = kHarnessRoot;  // the hosts report what is installed there, and get the harness tasks
    ASSERT_NO_FATAL_FAILURE(StartCluster(/*hosts=*/1, /*capacity=*/8));
  }

  // An agent task for `harness`; with `work`, the instruction gives the command that writes the proof file.
  static v1::Task HarnessTask(const std::string& harness, bool work) {
    v1::Task t;
    t.set_id(absl::StrCat(harness, work ? "-works" : "-claims"));
    t.set_runner(v1::RUNNER_AGENT);
    t.set_prompt(absl::StrCat("Write the proof file, then say so.\n",
                              work ? "RUN: echo corral-harness-ok > proof.txt\n" : "",
                              "ANSWER: The proof file is written."));
    t.mutable_agent()->set_harness(harness);  // found under the host's harness root, which the host tells it
    v1::Command* verify = t.mutable_verifier()->mutable_command();
    for (const char* arg : {"bash", "-c", "test \"$(cat /workspace/proof.txt)\" = corral-harness-ok"}) {
      verify->add_argv(arg);
    }
    t.mutable_verifier()->set_reward_source(v1::REWARD_SOURCE_EXIT_CODE);
    t.mutable_timeouts()->mutable_agent()->set_seconds(120);
    return t;
  }

  // Runs the harness's two tasks; checks the rewards, the answer in the agent's output and the token ids.
  void RunBoth(const std::string& harness) {
    v1::BatchSpec spec;
    spec.set_batch_id("harness-" + harness);
    spec.set_group_size(1);
    ASSERT_THAT(Submit(spec, {HarnessTask(harness, true), HarnessTask(harness, false)}), IsOk());
    auto results = Results(spec.batch_id());
    ASSERT_THAT(results, IsOk());
    ASSERT_EQ(results->size(), 2u);
    for (const v1::EpisodeResult& r : *results) {
      SCOPED_TRACE(absl::StrCat(r.ids().task_id(), ": ", r.failure_message(), "\n", r.agent_output_tail()));
      ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
      EXPECT_EQ(r.agent_exit_code(), 0);
      EXPECT_EQ(r.harness(), ResolveHarness(harness)->id());  // the version that ran
      EXPECT_THAT(r.agent_output_tail(), ::testing::HasSubstr("The proof file is written."));
      EXPECT_EQ(r.protections().network_policy(), v1::NETWORK_POLICY_PROXY_ONLY);
      const bool worked = r.ids().task_id() == harness + "-works";
      EXPECT_EQ(r.reward(), worked ? 1.0 : 0.0);
      // The harness's calls (its side calls, a title, say, among them), with the upstream's token ids.
      EXPECT_GE(r.trajectory().call_count(), worked ? 2u : 1u);
      ASSERT_GE(r.trajectory().branches_size(), 1);
      for (const v1::Branch& b : r.trajectory().branches()) EXPECT_FALSE(b.token_ids().empty());
      if (worked) {
        // The agent's tool call and its answer after the tool ran are one conversation: the harness sends the call
        // back in its own spelling, and the proxy restores the model's, so the turns share a branch in which both
        // are the model's own.
        bool one_lineage = false;
        for (const v1::Branch& b : r.trajectory().branches()) {
          bool called = false, answered = false;
          for (const v1::TrajectoryMessage& m : b.messages()) {
            called = called || (m.generated() && m.message().tool_calls_size() > 0);
            answered = answered || (called && m.generated() &&
                                    absl::StrContains(m.message().content(), "The proof file is written."));
          }
          one_lineage = one_lineage || answered;
        }
        EXPECT_TRUE(one_lineage) << r.trajectory().branches_size() << " branches";
        // That conversation is the one agent branch, every other call a side call; and it is the SDK's sample.
        int agent_branches = 0;
        for (const v1::Branch& b : r.trajectory().branches()) {
          EXPECT_THAT(b.role(), ::testing::AnyOf(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY));
          agent_branches += b.role() == v1::CALL_ROLE_AGENT ? 1 : 0;
        }
        EXPECT_EQ(agent_branches, 1);
        const v1::RoleCounts& roles = r.trajectory().calls_by_role();
        EXPECT_GE(roles.agent(), 2u);
        EXPECT_EQ(roles.agent() + roles.auxiliary(), r.trajectory().call_count());
        if (harness == "opencode") {
          EXPECT_GE(roles.auxiliary(), 1u) << "its title call";
        }
      }
    }
  }
};

TEST_F(HarnessAgentTest, ClaudeCodeDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("claude-code"); }

TEST_F(HarnessAgentTest, CodexDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("codex"); }

TEST_F(HarnessAgentTest, OpenCodeDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("opencode"); }

TEST_F(HarnessAgentTest, GeminiCliDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("gemini-cli"); }

TEST_F(HarnessAgentTest, QwenCodeDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("qwen-code"); }

TEST_F(HarnessAgentTest, PiDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("pi"); }

TEST_F(HarnessAgentTest, ClineDoesTheTaskInASandboxAndTheVerifierSeesIt) { RunBoth("cline"); }

TEST_F(HarnessAgentTest, AVersionNoHostHasIsRefusedAtSubmitWithTheCommandThatInstallsIt) {
  v1::BatchSpec spec;
  spec.set_batch_id("harness-missing");
  spec.set_group_size(1);
  v1::Task missing = HarnessTask("codex@0.0.1", true);
  missing.set_id("codex-missing");  // ('@' and '.' are not for ids)
  // Submit judges by what the hosts have said (before any has answered, the episodes would wait for one).
  ASSERT_TRUE(testing::WaitUntil([&] { return KnownHosts() == 1; }, absl::Seconds(30)));
  EXPECT_THAT(Submit(spec, {missing}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("the harness codex@0.0.1 is installed on no sandbox host: run 'corral "
                                            "harness install codex@0.0.1' on each host")));
  // The pinned version is there: the same task with the bare name is accepted.
  spec.set_batch_id("harness-pinned");
  EXPECT_THAT(Submit(spec, {HarnessTask("codex", false)}), IsOk());
}

// The example Harbor tasks (examples/tasks) through the CLI, `corral run --agent NAME`, on a model that calls the
// harness's shell tool with `bash .corral/agent/solve.sh`. Given the task's reference solution there
// (--agent-file), the harness runs it and the task's own tests pass: reward 1. Without it the command fails, the
// bug stays, and the tests say so: reward 0 for each of the three tasks.
class HarborHarnessTest : public HarnessAgentTest {
 protected:
  void SetUp() override { Start({"--shell-agent", "--shell-agent-command=bash .corral/agent/solve.sh"}); }

  // `corral run` with `args`; the results it wrote, one JSON object per line.
  std::vector<boost::json::object> Run(std::vector<std::string> args) {
    const std::string out = dir_ + "/results-" + std::to_string(runs_++) + ".jsonl";
    std::vector<std::string> argv = {CORRAL_CLI, "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& a : {"--scheduler=" + scheduler_->ready.grpc, "--token=" + token_, "--out=" + out}) {
      argv.push_back(a);
    }
    auto run = testing::Subprocess::Start(argv, out + ".log");
    EXPECT_THAT(run, IsOk());
    if (!run.ok()) return {};
    auto status = run->Wait(absl::Minutes(5));
    EXPECT_THAT(status, IsOk());
    EXPECT_EQ(status.value_or(-1), 0) << run->Log();
    std::vector<boost::json::object> results;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) results.push_back(boost::json::parse(line).as_object());
    }
    return results;
  }

  void SolvesWithTheSolutionAndNotWithout(const std::string& harness) {
    const std::string tasks = std::string(CORRAL_SOURCE_DIR) + "/examples/tasks";
    std::vector<boost::json::object> solved =
        Run({tasks + "/fix-mean", "--agent", harness, "--agent-file", tasks + "/fix-mean/solution/solve.sh"});
    ASSERT_EQ(solved.size(), 1u);
    EXPECT_EQ(solved[0].at("status"), "EPISODE_STATUS_FINISHED") << boost::json::serialize(solved[0]);
    EXPECT_EQ(solved[0].at("reward").to_number<double>(), 1.0) << boost::json::serialize(solved[0]);
    EXPECT_EQ(solved[0].at("harness"), boost::json::value(ResolveHarness(harness)->id()));
    std::vector<boost::json::object> unsolved = Run({tasks, "--agent", harness});
    ASSERT_EQ(unsolved.size(), 3u);
    for (const boost::json::object& r : unsolved) {
      EXPECT_EQ(r.at("status"), "EPISODE_STATUS_FINISHED") << boost::json::serialize(r);
      EXPECT_EQ(r.contains("reward") ? r.at("reward").to_number<double>() : 0.0, 0.0) << boost::json::serialize(r);
      EXPECT_GE(r.at("trajectory").at("call_count").to_number<int64_t>(), 2) << "the failed command, the answer";
    }
  }

  int runs_ = 0;
};

TEST_F(HarborHarnessTest, GeminiCliOnTheExampleTasks) { SolvesWithTheSolutionAndNotWithout("gemini-cli"); }
TEST_F(HarborHarnessTest, QwenCodeOnTheExampleTasks) { SolvesWithTheSolutionAndNotWithout("qwen-code"); }
TEST_F(HarborHarnessTest, PiOnTheExampleTasks) { SolvesWithTheSolutionAndNotWithout("pi"); }
TEST_F(HarborHarnessTest, ClineOnTheExampleTasks) { SolvesWithTheSolutionAndNotWithout("cline"); }

}  // namespace
}  // namespace corral
