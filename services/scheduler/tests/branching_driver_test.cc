// Branching tasks (Task.branch) on the episode path, against the same in-memory hosts, proxy and limiter as
// episode_driver_test.cc: the root splits at its turn into forked children that continue its conversation, and a
// fork or a session that fails ends only the children it concerns.
#include "services/scheduler/tests/episode_driver_fixture.h"

namespace corral::scheduler {
namespace {

using namespace driver_test;  // NOLINT: the fixture and its helpers
using ::testing::IsEmpty;

// Branching (Task.branch): a tool loop of 3 turns that splits 3 ways at turn 1.
class BranchingDriverTest : public EpisodeDriverTest {
 protected:
  v1::Task Branching() {
    v1::Task t;
    t.set_id("t0");
    t.set_prompt("Explore.");
    t.set_runner(v1::RUNNER_TOOL_LOOP);
    v1::ToolSpec* bash = t.mutable_tool_loop()->add_tools();
    bash->set_name("bash");
    bash->set_kind(v1::TOOL_KIND_BASH);
    t.mutable_tool_loop()->set_max_turns(3);
    t.mutable_reward()->set_function(v1::REWARD_FUNCTION_EXACT);
    t.set_answer("done");
    v1::BranchPoint* at = t.mutable_branch()->add_at();
    at->set_turn(1);
    at->set_count(3);
    return t;
  }
  // Submits a group of 3 of `task` and starts its root.
  void StartGroup(v1::Task task) {
    EnsureHosts();
    std::vector<std::shared_ptr<const v1::Task>> tasks{std::make_shared<v1::Task>(std::move(task))};
    absl::StatusOr<v1::Batch> submitted = absl::UnknownError("not submitted");
    table_.Submit(Spec("b", 3), "digest-b", std::move(tasks),
                  [&](absl::StatusOr<v1::Batch> b) { submitted = std::move(b); });
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    std::optional<EpisodeTicket> root = table_.StartNext(Any);
    ASSERT_TRUE(root.has_value());
    EXPECT_EQ(table_.StartNext(Any), std::nullopt);  // the children wait for the split
    driver_->Start(*root);
  }
  std::map<uint32_t, v1::EpisodeResult> ResultsByIndex() {
    std::map<uint32_t, v1::EpisodeResult> out;
    for (const auto& [r, redundant] : log_.journaled) out[r.ids().index_in_group()] = r;
    return out;
  }
};

TEST_F(BranchingDriverTest, TheRootSplitsAtItsTurnIntoForkedChildrenThatContinueItsConversation) {
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "echo step >> log"})"));
  StartGroup(Branching());
  RunToEnd();
  auto results = ResultsByIndex();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(host().fork_calls(), 1);
  EXPECT_THAT(host().live(), IsEmpty());  // the root's sandbox and both forks are deleted
  const std::string root_sandbox = results[0].sandbox_id();
  for (uint32_t i = 0; i < 3; ++i) {
    const v1::EpisodeResult& r = results[i];
    SCOPED_TRACE(r.ids().episode_id());
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
    EXPECT_EQ(r.llm_calls(), 3u);  // the shared turn 0, then turns 1 and 2 of its own
    EXPECT_EQ(r.tool_calls(), 3u);
    EXPECT_EQ(r.branch().root_episode_id(), "b:g0:e0");
    EXPECT_THAT(r.branch().path(), ::testing::ElementsAre(i));
    EXPECT_THAT(r.branch().turns(), ::testing::ElementsAre(1u));
    if (i == 0) {
      EXPECT_EQ(r.branch().parent_episode_id(), "");
      continue;
    }
    EXPECT_EQ(r.branch().parent_episode_id(), "b:g0:e0");
    EXPECT_EQ(r.branch().sibling_index(), i);
    EXPECT_EQ(r.branch().turn(), 1u);
    EXPECT_NE(r.sandbox_id(), root_sandbox);
    EXPECT_EQ(r.host_address(), "host-a");
  }
  // Each child's first call sent the root's turn 0 (its tool call and the tool's answer) as its prompt.
  const std::vector<std::string> bodies = proxy_->bodies();
  ASSERT_EQ(bodies.size(), 7u);  // the root's 3, and 2 for each child
  size_t with_prefix = 0;
  for (const auto& body : bodies) with_prefix += body.find("echo step >> log") != std::string::npos ? 1 : 0;
  EXPECT_EQ(with_prefix, 6u);  // every call but the root's first
}

TEST_F(BranchingDriverTest, AConversationThatEndsBeforeTheTurnSplitsAtItsLastTurn) {
  proxy_->Reply(ChatCompletion("done"));  // the model answers at once: turn 0 is the last
  StartGroup(Branching());
  RunToEnd();
  auto results = ResultsByIndex();
  ASSERT_EQ(results.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(results[i].status(), v1::EPISODE_STATUS_FINISHED) << results[i].failure_message();
    EXPECT_EQ(results[i].reward(), 1.0);
    EXPECT_EQ(results[i].llm_calls(), 1u);  // each sampled turn 0 itself
    EXPECT_THAT(results[i].branch().turns(), ::testing::ElementsAre(0u));
  }
  EXPECT_EQ(proxy_->bodies().size(), 3u);
}

TEST_F(BranchingDriverTest, AForkTheHostRefusesEndsTheChildrenAsInfraAndTheParentGoesOn) {
  UseHosts({"host-a"}, /*capacity=*/2);  // room for the root and one fork
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "true"})"));
  StartGroup(Branching());
  RunToEnd();
  auto results = ResultsByIndex();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(results[1].status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(results[2].status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(results[2].failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_EQ(results[2].ids().attempt(), 1u);  // not retried: it has nothing to start again from
  EXPECT_THAT(results[2].failure_message(), HasSubstr("had no room for this branch (the host is full)"));
  EXPECT_THAT(host().live(), IsEmpty());
  EXPECT_EQ(hosts_->InUse(""), 0u);
}

TEST_F(BranchingDriverTest, AChildWhoseSessionCannotOpenEndsAndItsForkIsDeleted) {
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "true"})"));
  proxy_->FailOpensOf("b:g0:e2", absl::InvalidArgumentError("model 'x' is not served"));
  StartGroup(Branching());
  RunToEnd();
  auto results = ResultsByIndex();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(results[1].status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(results[2].status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_THAT(results[2].failure_message(), HasSubstr("not served"));
  EXPECT_EQ(host().fork_calls(), 1);
  EXPECT_THAT(host().live(), IsEmpty());  // its fork went with it
  EXPECT_EQ(hosts_->InUse(""), 0u);
}

}  // namespace
}  // namespace corral::scheduler
