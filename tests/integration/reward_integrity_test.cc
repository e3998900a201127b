// Reward integrity, attacked: agents that do nothing useful and try, one test each, to be rewarded anyway —
// through a planted reward file, processes that outlive the agent phase, the verifier's files, the answer, and
// the cluster's own endpoints. Real binaries (scheduler, proxy, limiter, sandbox host, scripted model), the agent
// runner as users run it. Every attack must end with reward 0 or with a failure that carries no reward.
#include <fstream>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "libs/api/proto_digest.h"
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
    auto result = SchedulerFixture::RunOne(task);
    EXPECT_THAT(result, IsOk());
    return result.ok() ? *result : v1::EpisodeResult();
  }
  // Runs `tasks` (one episode each) in one batch: their results by task id.
  std::map<std::string, v1::EpisodeResult> RunEach(const std::string& batch, const std::vector<v1::Task>& tasks) {
    v1::BatchSpec spec;
    spec.set_batch_id(batch);
    spec.set_group_size(1);
    EXPECT_THAT(Submit(spec, tasks), IsOk());
    auto results = Results(spec.batch_id());
    EXPECT_THAT(results, IsOk());
    std::map<std::string, v1::EpisodeResult> out;
    for (const v1::EpisodeResult& r : results.ok() ? *results : std::vector<v1::EpisodeResult>{}) {
      out[r.ids().task_id()] = r;
    }
    EXPECT_EQ(out.size(), tasks.size());
    return out;
  }
  // An attack run three times: against the default verifier (a fork of the sandbox, as another uid, in a clean
  // environment) and a CLEAN_ENV one (the agent's sandbox) it earns nothing; against a SHARED verifier (the
  // behaviour before either) the same attack is rewarded, so the test would see the defence go.
  void ExpectOnlyTheSharedVerifierIsFooled(const v1::Task& attack) {
    auto variant = [&](const std::string& suffix, v1::VerifierIsolation isolation) {
      v1::Task t = attack;
      t.set_id(attack.id() + suffix);
      t.mutable_verifier()->set_isolation(isolation);
      return t;
    };
    const v1::Task clean = variant("-clean", v1::VERIFIER_ISOLATION_CLEAN_ENV);
    const v1::Task shared = variant("-shared", v1::VERIFIER_ISOLATION_SHARED);
    auto r = RunEach("attack-" + attack.id(), {attack, clean, shared});
    ASSERT_EQ(r.size(), 3u);
    for (const auto& [id, isolation] : {std::pair(attack.id(), v1::VERIFIER_ISOLATION_SEPARATE_UID),
                                        std::pair(clean.id(), v1::VERIFIER_ISOLATION_CLEAN_ENV)}) {
      SCOPED_TRACE(id);
      EXPECT_EQ(r[id].status(), v1::EPISODE_STATUS_FINISHED) << r[id].failure_message();
      ExpectNoReward(r[id]);
      EXPECT_EQ(r[id].verifier_evidence().isolation(), isolation);
    }
    const v1::EpisodeResult& fooled = r[shared.id()];
    EXPECT_EQ(fooled.status(), v1::EPISODE_STATUS_FINISHED)
        << fooled.failure_message() << "\nverifier: " << fooled.verifier_output_tail();
    EXPECT_EQ(fooled.reward(), 1.0) << "the attack should win against a shared verifier: "
                                    << fooled.verifier_output_tail();
    EXPECT_EQ(fooled.verifier_evidence().isolation(), v1::VERIFIER_ISOLATION_SHARED);
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

// A verifier that runs the task's failing pytest test and rewards its success, as SWE-style verifiers do.
v1::Task PytestAttack(const std::string& id, const std::string& attack) {
  v1::Task t =
      Attack(id, attack,
             "cd /workspace && if python3 -m pytest -q -p no:cacheprovider tests/test_answer.py >&2; then echo 1; "
             "else echo 0; fi > /logs/verifier/reward.txt\n");
  v1::InlineFile* test = t.mutable_verifier()->add_files();
  test->set_path("/workspace/tests/test_answer.py");
  test->set_content("def test_answer():\n    assert open('/workspace/answer.txt').read().strip() == '5'\n");
  return t;
}

TEST_F(RewardIntegrityTest, APytestModuleInTheWorkingDirectoryDoesNotShadowTheRealOne) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  ExpectOnlyTheSharedVerifierIsFooled(
      PytestAttack("pytest-shadow", "printf 'import sys\\nsys.exit(0)\\n' > /workspace/pytest.py"));
}

TEST_F(RewardIntegrityTest, AConftestInTheWorkingDirectoryIsNotLoadedForTheVerifiersTests) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  // Every test reported as passed, whatever it asserted.
  ExpectOnlyTheSharedVerifierIsFooled(PytestAttack(
      "conftest-cwd",
      "printf 'import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
      "    o = yield\\n    o.get_result().outcome = \"passed\"\\n' > /workspace/conftest.py"));
}

TEST_F(RewardIntegrityTest, AGitFsmonitorHookLeavesNoWriterBehindTheVerifier) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  // The hook git runs on `git status` starts a writer that keeps putting 1 where the reward is read; the verifier
  // writes 0 and goes on with its work a moment.
  ExpectOnlyTheSharedVerifierIsFooled(
      Attack("git-fsmonitor",
             "cd /workspace && git init -q . && printf '#!/bin/sh\\n(while :; do mkdir -p /logs/verifier; echo 1 > "
             "/logs/verifier/r.tmp && mv -f /logs/verifier/r.tmp /logs/verifier/reward.txt; sleep 0.05; done) "
             "< /dev/null > /dev/null 2>&1 &\\n' > .git/fsm.sh && chmod +x .git/fsm.sh && git config core.fsmonitor "
             "/workspace/.git/fsm.sh && echo hooked",
             "cd /workspace && git status > /dev/null 2>&1; echo 0 > /logs/verifier/reward.txt; sleep 1\n"));
}

TEST_F(RewardIntegrityTest, TheAgentsDotfilesDoNotRunInTheVerifiersShell) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  // A login shell reads ~/.bash_profile first: the agent's writes the reward and ends the shell there.
  v1::Task t = Attack("dotfiles",
                      "printf 'mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; exit 0\\n' | tee "
                      "$HOME/.bash_profile > $HOME/.profile");
  t.mutable_verifier()->mutable_command()->Clear();
  for (const char* arg : {"bash", "-l", "tests/test.sh"}) t.mutable_verifier()->mutable_command()->add_argv(arg);
  ExpectOnlyTheSharedVerifierIsFooled(t);
}

// A verifier that cannot start is the task's failure, not a reward of 0; and a relative verifier file is where
// the default command looks for it.
TEST_F(RewardIntegrityTest, AVerifierThatCannotStartFailsTheEpisodeAndNoRewardIsRecorded) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 4));
  auto with_command = [](v1::Task t, const std::string& id, std::vector<std::string> argv) {
    t.set_id(id);
    t.mutable_verifier()->mutable_command()->Clear();
    for (const std::string& arg : argv) t.mutable_verifier()->mutable_command()->add_argv(arg);
    return t;
  };
  const v1::Task base = Attack("base", "true", "echo 1 > /logs/verifier/reward.txt\n");
  v1::Task relative = with_command(base, "relative-default", {});
  relative.mutable_verifier()->mutable_files(0)->set_path("tests/test.sh");
  auto r = RunEach("cannot-start", {with_command(base, "missing-script", {"bash", "tests/missing.sh"}),
                                    with_command(base, "missing-interpreter", {"python9", "tests/test.py"}),
                                    with_command(base, "not-executable", {"./tests/test.sh"}), relative});
  for (const char* id : {"missing-script", "missing-interpreter", "not-executable"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(r[id].status(), v1::EPISODE_STATUS_FAILED) << r[id].verifier_output_tail();
    EXPECT_EQ(r[id].failure_class(), v1::FAILURE_CLASS_VERIFIER);
    EXPECT_FALSE(r[id].has_reward());
    EXPECT_THAT(r[id].failure_message(), HasSubstr("the verifier could not run"));
  }
  EXPECT_THAT(r["missing-script"].failure_message(), HasSubstr("exit 127"));
  EXPECT_THAT(r["not-executable"].failure_message(), HasSubstr("exit 126"));
  // The control: an honest verifier that writes 1 gets exactly 1, found where its relative path says.
  EXPECT_EQ(r["relative-default"].status(), v1::EPISODE_STATUS_FINISHED) << r["relative-default"].failure_message();
  EXPECT_EQ(r["relative-default"].reward(), 1.0);
  EXPECT_EQ(r["relative-default"].verifier_evidence().reward_source(), "reward.txt");
  EXPECT_EQ(r["relative-default"].verifier_evidence().reward_file_sha256(), Sha256Hex("1\n"));
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
