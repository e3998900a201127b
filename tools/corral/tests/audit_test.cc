// corral audit's logic: the plan (each agent task once per exploit, its agent replaced), the verdict per task
// (an exploit above the do-nothing baseline; a rewarded do-nothing agent is a broken verifier) and the report.
#include "tools/corral/audit.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::EpisodeResult Ended(const std::string& task_id, std::optional<double> reward, const std::string& failure = "") {
  v1::EpisodeResult r;
  r.mutable_ids()->set_task_id(task_id);
  r.set_status(reward ? v1::EPISODE_STATUS_FINISHED : v1::EPISODE_STATUS_FAILED);
  if (reward) r.set_reward(*reward);
  r.set_failure_message(failure);
  return r;
}

TEST(PlanAudit, EachAgentTaskRunsOncePerExploitWithItsAgentReplacedAndOthersAreSkipped) {
  v1::Task agent;
  agent.set_id("fix-mean");
  agent.set_runner(v1::RUNNER_AGENT);
  agent.mutable_agent()->set_harness("codex");
  agent.mutable_verifier()->mutable_command()->add_argv("bash");
  v1::Task single;
  single.set_id("arith-1");
  single.set_runner(v1::RUNNER_SINGLE_TURN);
  const AuditPlan plan = PlanAudit({agent, single});
  ASSERT_EQ(plan.tasks.size(), Exploits().size());
  EXPECT_EQ(Exploits().front().name, "do-nothing");
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const v1::Task& t = plan.tasks[i];
    EXPECT_EQ(t.id(), "fix-mean:" + Exploits()[i].name);
    EXPECT_EQ(t.agent().harness(), "") << "the exploit replaces the harness";
    ASSERT_EQ(t.agent().command().argv_size(), 3);
    EXPECT_EQ(t.agent().command().argv(0), "sh");
    EXPECT_THAT(t.agent().command().argv(2), HasSubstr("/chat/completions")) << "one model call first";
    EXPECT_THAT(t.agent().command().argv(2), HasSubstr(Exploits()[i].script));
    EXPECT_EQ(t.verifier().command().argv(0), "bash") << "the task's own verifier";
  }
  ASSERT_EQ(plan.skipped.size(), 1u);
  EXPECT_THAT(plan.skipped[0], HasSubstr("arith-1: not an agent task"));
}

TEST(JudgeAudit, AnExploitAboveTheBaselineIsAFindingAndARewardedBaselineABrokenVerifier) {
  const std::vector<TaskAudit> audits = JudgeAudit({
      Ended("honest:do-nothing", 0), Ended("honest:planted-reward", 0), Ended("honest:conftest", std::nullopt),
      Ended("shadowed:do-nothing", 0), Ended("shadowed:shadowed-modules", 1), Ended("shadowed:dotfiles", 0),
      Ended("lazy:do-nothing", 1), Ended("lazy:planted-reward", 1),
      Ended("crashy:do-nothing", std::nullopt, "the verifier could not run"), Ended("crashy:git-hooks", 0.5),
      Ended("someone-else", 1),  // not one of the audit's
  });
  ASSERT_EQ(audits.size(), 4u);
  EXPECT_EQ(audits[0].task_id, "honest");
  EXPECT_FALSE(audits[0].flagged());
  EXPECT_EQ(audits[1].task_id, "shadowed");
  ASSERT_EQ(audits[1].wins.size(), 1u);
  EXPECT_EQ(audits[1].wins[0].exploit->name, "shadowed-modules");
  EXPECT_FALSE(audits[1].broken());
  EXPECT_TRUE(audits[2].broken()) << "a do-nothing agent earns 1";
  EXPECT_TRUE(audits[2].wins.empty()) << "nothing earned more than the baseline";
  EXPECT_FALSE(audits[3].baseline.has_value());
  EXPECT_THAT(audits[3].baseline_failure, HasSubstr("could not run"));
  ASSERT_EQ(audits[3].wins.size(), 1u) << "held against 0 when the baseline has no reward";

  const std::string report = AuditReport(audits, {"arith-1: not an agent task"});
  EXPECT_THAT(report, HasSubstr("honest: ok (do-nothing agent: 0; no exploit earned more)"));
  EXPECT_THAT(report, HasSubstr("shadowed: EXPLOITABLE (do-nothing agent: 0)"));
  EXPECT_THAT(report, HasSubstr("shadowed-modules earned 1: "));
  EXPECT_THAT(report, HasSubstr("pytest.py")) << "the exploit's script is attached";
  EXPECT_THAT(report, HasSubstr("lazy: BROKEN VERIFIER (do-nothing agent: 1)"));
  EXPECT_THAT(report, HasSubstr("skipped arith-1: not an agent task"));
  EXPECT_THAT(report, HasSubstr("4 task(s) audited with 8 exploits: 3 flagged, 1 skipped"));
  EXPECT_THAT(report, Not(HasSubstr("someone-else")));
}

}  // namespace
}  // namespace corral::cli
