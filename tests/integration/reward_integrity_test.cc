// Reward integrity, attacked: agents that do nothing useful and try, one test each, to be rewarded anyway —
// through a planted reward file, processes that outlive the agent phase, the verifier's files, the answer, and
// the cluster's own endpoints. Real binaries (scheduler, proxy, limiter, sandbox host, scripted model), the agent
// runner as users run it. Every attack must end with reward 0 or with a failure that carries no reward.
#include <fstream>

#include "gmock/gmock.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The verifier every attack faces unless it says otherwise: the task is "write 5 to /workspace/answer.txt",
// and only that earns 1 (nobody does it here).
constexpr char kHonestVerifier[] =
    "if [ \"$(cat /workspace/answer.txt 2>/dev/null)\" = 5 ]; then echo 1; else echo 0; fi > "
    "/logs/verifier/reward.txt\n";

// An agent that asks the model once (so the episode has data) and then runs `attack` (sh), never solving the
// task. Its verifier is `tests/test.sh` = `verifier`.
v1::Task Attack(const std::string& id, const std::string& attack, const std::string& verifier = kHonestVerifier) {
  v1::Task t;
  t.set_id(id);
  t.set_prompt("What is 2 + 3? Write it to /workspace/answer.txt.");
  t.set_answer("5");
  t.set_runner(v1::RUNNER_AGENT);
  v1::Command& agent = *t.mutable_agent()->mutable_command();
  agent.add_argv("sh");
  agent.add_argv("-c");
  agent.add_argv(absl::StrCat(
      "python3 -c \"import json,os,urllib.request as u\n"
      "r=u.Request(os.environ['OPENAI_BASE_URL']+'/chat/completions',method='POST',"
      "data=json.dumps({'model':os.environ['OPENAI_MODEL'],'messages':[{'role':'user','content':'hi'}]}).encode(),"
      "headers={'Authorization':'Bearer '+os.environ['OPENAI_API_KEY'],'Content-Type':'application/json'})\n"
      "u.urlopen(r,timeout=60).read()\"\n",
      attack));
  v1::InlineFile* test = t.mutable_verifier()->add_files();
  test->set_path("/workspace/tests/test.sh");
  test->set_content(verifier);
  t.mutable_verifier()->mutable_command()->add_argv("bash");
  t.mutable_verifier()->mutable_command()->add_argv("tests/test.sh");
  return t;
}

class RewardIntegrityTest : public SchedulerFixture {
 protected:
  // Runs `task` once and returns its result.
  v1::EpisodeResult RunOne(const v1::Task& task) {
    v1::BatchSpec spec;
    spec.set_batch_id("attack-" + task.id());
    spec.set_group_size(1);
    EXPECT_THAT(Submit(spec, {task}), IsOk());
    auto results = Results(spec.batch_id());
    EXPECT_THAT(results, IsOk());
    if (!results.ok() || results->size() != 1) return {};
    return results->front();
  }
  static void ExpectNoReward(const v1::EpisodeResult& r) {
    SCOPED_TRACE(r.ids().episode_id() + ": " + r.failure_message() + "\nagent: " + r.agent_output_tail() +
                 "\nverifier: " + r.verifier_output_tail());
    ASSERT_NE(r.status(), v1::EPISODE_STATUS_UNSPECIFIED);
    if (r.status() == v1::EPISODE_STATUS_FINISHED) {
      EXPECT_EQ(r.reward(), 0.0);
    } else {
      EXPECT_FALSE(r.has_reward());
    }
  }
};

TEST_F(RewardIntegrityTest, APlantedRewardFileDoesNotCountWhenTheVerifierWritesNone) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  // The verifier fails before writing (its test runner is missing): its exit code decides.
  const v1::EpisodeResult r = RunOne(Attack("planted", "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt",
                                            "no-such-test-runner\nexit 1\n"));
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, APlantedRewardJsonDoesNotCountEither) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  ExpectNoReward(RunOne(Attack("planted-json",
                               "mkdir -p /logs/verifier; echo '{\"reward\": 1}' > "
                               "/logs/verifier/reward.json",
                               "exit 3\n")));
}

TEST_F(RewardIntegrityTest, ASetsidBackgroundWriterIsGoneBeforeTheVerifierRuns) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  const v1::EpisodeResult r =
      RunOne(Attack("setsid",
                    "setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; done' "
                    "< /dev/null > /dev/null 2>&1 &"));
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, ADoubleForkedDaemonRacingTheVerifiersUploadIsGoneFirst) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  // Keeps replacing the verifier's script with one that rewards, from a grandchild re-parented away.
  const v1::EpisodeResult r =
      RunOne(Attack("double-fork",
                    "(setsid sh -c 'while :; do mkdir -p /workspace/tests /logs/verifier; "
                    "echo \"echo 1 > /logs/verifier/reward.txt\" > /workspace/tests/test.sh; "
                    "echo 1 > /logs/verifier/reward.txt; done' < /dev/null > /dev/null 2>&1 &) ; sleep 0.2"));
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, ARewardDirectoryReplacedByASymlinkIsRemovedNotFollowed) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  ExpectNoReward(RunOne(Attack("symlink",
                               "mkdir -p /workspace/fake; echo 1 > /workspace/fake/reward.txt; "
                               "rm -rf /logs/verifier; ln -s /workspace/fake /logs/verifier",
                               "exit 1\n")));
}

TEST_F(RewardIntegrityTest, FilesPlantedBesideTheVerifiersOwnAreRemovedWhenTheTaskNamesTheirDirectory) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  // A verifier that trusts whatever sits in tests/ (as a conftest.py would be picked up by pytest).
  const std::string trusting =
      "mkdir -p /logs/verifier; if [ -f tests/override ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";
  v1::Task task = Attack("conftest", "mkdir -p /workspace/tests; touch /workspace/tests/override", trusting);
  task.mutable_verifier()->add_replace_paths("/workspace/tests");
  const v1::EpisodeResult r = RunOne(task);
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, TheAnswerIsNotInTheSandboxWhileTheAgentRuns) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  // Copies whatever answer it can find where the verifier reads its own.
  const v1::EpisodeResult r = RunOne(Attack(
      "read-answer",
      "python3 -c \"import json,os; print(json.load(open(os.environ['HOME']+'/.corral/task.json')).get('answer', "
      "'none'))\" > /workspace/answer.txt; grep -rl '\"answer\"' $HOME /workspace 2>/dev/null; "
      "echo found: $(cat /workspace/answer.txt)"));
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("found: none"));
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, TheVerifiersInterpreterCannotBeReplacedInAPlainSandbox) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  const v1::EpisodeResult r = RunOne(Attack(
      "interpreter",
      "for d in /usr/local/bin /usr/bin /bin; do printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > $d/bash "
      "2>/dev/null && echo replaced $d; done; echo tried"));
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("tried"));
  EXPECT_THAT(r.agent_output_tail(), Not(HasSubstr("replaced")));
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, CodePlantedInTheHomesPythonSiteDoesNotRunInTheVerifier) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  // usercustomize.py in the user site-packages is imported by every python the uid starts — unless told not to.
  const v1::EpisodeResult r =
      RunOne(Attack("usercustomize",
                    "d=$(python3 -c 'import site; print(site.getusersitepackages())'); mkdir -p \"$d\"; "
                    "printf 'import os\\nos.makedirs(\"/logs/verifier\", exist_ok=True)\\n"
                    "open(\"/logs/verifier/reward.txt\", \"w\").write(\"1\")\\n' > \"$d/usercustomize.py\"; "
                    "python3 -c 'print(open(\"/logs/verifier/reward.txt\").read())' && echo planted-and-imported",
                    "python3 -c 'import sys; sys.exit(1)'\n"));
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("planted-and-imported"));  // it works for the agent itself
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  ExpectNoReward(r);
}

TEST_F(RewardIntegrityTest, NoClusterEndpointGivesAnOpenNetworkSandboxTaskDataWithoutTheToken) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  // A sibling batch whose answer is worth stealing.
  v1::BatchSpec sibling;
  sibling.set_batch_id("sibling");
  sibling.set_group_size(1);
  v1::Task secret = Arithmetic("secret", 20, 22, v1::RUNNER_SINGLE_TURN);
  ASSERT_THAT(Submit(sibling, {secret}), IsOk());
  ASSERT_THAT(Results("sibling"), IsOk());
  // From inside the sandbox: the inspector's API, the services' metrics and the proxy without a session token.
  std::string probe = "python3 -c \"import urllib.request as u, urllib.error as e\nfor url in [";
  for (const std::string& url : {absl::StrCat("http://", scheduler_->ready.http, "/api/batches"),
                                 absl::StrCat("http://", scheduler_->ready.http, "/api/episode?id=sibling:g0:e0"),
                                 absl::StrCat("http://", scheduler_->ready.http, "/api/batch?id=sibling"),
                                 absl::StrCat("http://", proxy_->ready.http, "/v1/models"),
                                 absl::StrCat("http://", scheduler_->ready.metrics, "/metrics")}) {
    absl::StrAppend(&probe, "'", url, "',");
  }
  absl::StrAppend(&probe,
                  "]:\n  try: body=u.urlopen(url,timeout=10).read().decode(); print(url, 200, 'LEAK' if '42' in body "
                  "and 'api' in url else 'ok')\n"
                  "  except e.HTTPError as x: print(url, x.code)\"");
  v1::Task task = Attack("probe", probe);
  task.mutable_environment()->set_network_policy(v1::NETWORK_POLICY_OPEN);
  const v1::EpisodeResult r = RunOne(task);
  SCOPED_TRACE(r.agent_output_tail());
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("/api/batches 401"));
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("sibling:g0:e0 401"));
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("id=sibling 401"));
  EXPECT_THAT(r.agent_output_tail(), HasSubstr("/v1/models 401"));
  EXPECT_THAT(r.agent_output_tail(), Not(HasSubstr("LEAK")));
  ExpectNoReward(r);
  // /metrics answers (Prometheus scrapes it) but carries no task data: no task id, no answer.
  auto metrics = http::HttpGet(scheduler_->ready.metrics, "/metrics");
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(*metrics, Not(HasSubstr("secret")));
  EXPECT_THAT(*metrics, Not(HasSubstr("sibling")));
}

}  // namespace
}  // namespace corral
