// tool_loop tools through the scheduler with a scripted model (corral-fake-llm's tool_script): persistent bash
// and python sessions keep their state between calls, a timed-out call is interrupted without ending the
// episode or the session, and plain tools start fresh every call.
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
// GCC 12 reports a false -Wrestrict inside std::string here (GCC bug 105651).
#pragma GCC diagnostic ignored "-Wrestrict"
#include <set>

#include "gmock/gmock.h"
#include "libs/api/proto_time.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

// A tool_loop task whose model calls `tool` with each of `script`, then answers "done: <last output>".
v1::Task Scripted(const std::string& id, v1::ToolKind kind, bool persistent, const std::vector<std::string>& script,
                  const std::string& expected) {
  v1::Task t;
  t.set_id(id);
  t.set_prompt("use the tool");
  t.set_answer(absl::StrCat("done: ", expected));
  t.set_runner(v1::RUNNER_TOOL_LOOP);
  std::string steps;
  for (const auto& s : script) absl::StrAppend(&steps, steps.empty() ? "" : ",", "\"", s, "\"");
  t.mutable_llm()->set_params_json(absl::StrCat("{\"fake\": {\"tool_script\": [", steps, "]}}"));
  v1::ToolSpec* tool = t.mutable_tool_loop()->add_tools();
  tool->set_name(kind == v1::TOOL_KIND_BASH ? "shell" : "python");
  tool->set_kind(kind);
  tool->set_persistent(persistent);
  t.mutable_tool_loop()->set_max_turns(static_cast<uint32_t>(script.size()) + 1);
  t.mutable_timeouts()->mutable_tool()->set_seconds(2);
  return t;
}

TEST_F(SchedulerFixture, PersistentToolsKeepStateAndSurviveATimedOutCall) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  const std::vector<v1::Task> tasks = {
      // bash: the working directory, an exported variable and a background job survive between calls.
      Scripted("bash-state", v1::TOOL_KIND_BASH, true,
               {"mkdir -p /tmp/w && cd /tmp/w", "export GREETING=hello; sleep 300 & echo started",
                "jobs -r > /tmp/jobs; echo $(pwd) $GREETING $(wc -l < /tmp/jobs)"},
               "/tmp/w hello 1"),
      // python: variables survive; the last expression is echoed; a hung call is interrupted, the state kept.
      Scripted("python-state", v1::TOOL_KIND_CODE_INTERPRETER, true,
               {"x = 41", "import time\\ntime.sleep(60)", "x + 1"}, "42"),
      // bash: a hung command is interrupted and the shell keeps its state.
      Scripted("bash-timeout", v1::TOOL_KIND_BASH, true, {"Y=7", "sleep 60", "echo y=$Y"}, "y=7"),
      // Without `persistent`, every call is a fresh process.
      Scripted("bash-fresh", v1::TOOL_KIND_BASH, false, {"export Z=1", "echo z=$Z"}, "z="),
  };
  v1::BatchSpec spec;
  spec.set_batch_id("tools");
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  auto results = Results("tools");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), tasks.size());
  for (const auto& r : *results) {
    SCOPED_TRACE(r.ids().task_id() + ": " + r.failure_message());
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    ASSERT_GE(r.trajectory().branches_size(), 1);
    const auto& messages = r.trajectory().branches(0).messages();
    EXPECT_EQ(absl::StripAsciiWhitespace(messages.rbegin()->message().content()),
              tasks[r.ids().group_index()].answer());
    EXPECT_EQ(r.reward(), 1.0);
    if (r.ids().task_id() == "python-state" || r.ids().task_id() == "bash-timeout") {
      bool interrupted = false;
      for (const auto& m : messages) {
        if (m.message().role() == "tool" &&
            absl::StrContains(m.message().content(), "timed out after 2s and was interrupted")) {
          interrupted = true;
        }
      }
      EXPECT_TRUE(interrupted);
      EXPECT_LT(FromProto(r.timings().total()), absl::Seconds(20));
    }
  }
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, WarmSandboxesServeTheNextBatchOfTheSameSpec) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8, {"--warm-pool-size=3", "--warm-pool-idle=3s"}));
  auto batch = [&](const std::string& id, int n) {
    std::vector<v1::Task> tasks;
    for (int i = 0; i < n; ++i) {
      tasks.push_back(Scripted(absl::StrCat(id, i), v1::TOOL_KIND_BASH, false, {"echo $CORRAL_SANDBOX_ID"}, ""));
    }
    v1::BatchSpec spec;
    spec.set_batch_id(id);
    return Submit(spec, tasks);
  };
  // The first batch misses (nothing is warm yet) and makes the spec wanted; the pool then fills to 3.
  ASSERT_THAT(batch("cold", 2), IsOk());
  auto cold = Results("cold");
  ASSERT_THAT(cold, IsOk());
  for (const auto& r : *cold) EXPECT_FALSE(r.warm_sandbox()) << r.ids().episode_id() << " found a warm sandbox";
  ASSERT_TRUE(testing::WaitUntil([&] { return LiveSandboxes(0) == 3; }, absl::Seconds(20)));
  std::set<std::string> warm;
  {
    auto stub = v1::SandboxHost::NewStub(*MakeChannel(hosts_[0].service->ready.grpc));
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListSandboxesRequest req;
    (*req.mutable_label_selector())["corral.warm"] = "1";
    v1::ListSandboxesResponse resp;
    ASSERT_TRUE(stub->ListSandboxes(&ctx, req, &resp).ok());
    for (const auto& sb : resp.sandboxes()) warm.insert(sb.sandbox_id());
  }
  ASSERT_EQ(warm.size(), 3u);
  // The next batch of the same spec runs in exactly those sandboxes.
  ASSERT_THAT(batch("warm", 3), IsOk());
  auto results = Results("warm");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 3u);
  for (const auto& r : *results) {
    EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
    EXPECT_EQ(warm.count(r.sandbox_id()), 1u) << r.sandbox_id() << " was not a warm sandbox";
    EXPECT_TRUE(r.warm_sandbox());
  }
  // Once nobody asks for the spec, its warm sandboxes go.
  EXPECT_TRUE(NothingLeaked());
}

}  // namespace
}  // namespace corral

namespace corral {
namespace {

// Branching (Task.branch) on the real cluster: the root writes a file at turn 0, splits 4 ways at turn 1 (forks
// of its sandbox), and each branch reads the file, appends to it and names itself from its own task.json.
TEST_F(SchedulerFixture, ABranchingTaskSplitsIntoForksThatShareTheSandboxAndTheConversationPrefix) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::Task task = Scripted("tree", v1::TOOL_KIND_BASH, false,
                           {"python3 -c 'import time; [0 for _ in iter(lambda: time.process_time() < 0.8, False)]'; "
                            "echo root > note.txt",
                            "echo $(cat note.txt) $(echo x >> note.txt; wc -l < note.txt) "
                            "$(tr -d '\\\\n ' < $HOME/.corral/task.json | grep -o 'g0:e[0-9]*')"},
                           "root 2 g0:e0");
  v1::BranchPoint* at = task.mutable_branch()->add_at();
  at->set_turn(1);
  v1::BatchSpec spec;
  spec.set_batch_id("tree");
  spec.set_group_size(4);
  ASSERT_THAT(Submit(spec, {task}), IsOk());
  auto results = Results("tree");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 4u);
  std::set<std::string> sandboxes;
  for (const auto& r : *results) {
    const uint32_t i = r.ids().index_in_group();
    SCOPED_TRACE(absl::StrCat(r.ids().episode_id(), ": ", r.failure_message()));
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    sandboxes.insert(r.sandbox_id());
    // The file the root wrote before the split, appended to by this branch alone, and its own task.json.
    ASSERT_GE(r.trajectory().branches_size(), 1);
    const auto& messages = r.trajectory().branches(0).messages();
    EXPECT_EQ(absl::StripAsciiWhitespace(messages.rbegin()->message().content()), absl::StrCat("done: root 2 g0:e", i));
    EXPECT_EQ(r.reward(), i == 0 ? 1.0 : 0.0);
    // The tree.
    EXPECT_EQ(r.branch().root_episode_id(), "tree:g0:e0");
    EXPECT_THAT(r.branch().path(), ::testing::ElementsAre(i));
    EXPECT_THAT(r.branch().turns(), ::testing::ElementsAre(1u));
    EXPECT_EQ(r.branch().parent_episode_id(), i == 0 ? "" : "tree:g0:e0");
    EXPECT_EQ(r.branch().sibling_index(), i);
    EXPECT_EQ(r.branch().prefix_calls(), i == 0 ? 0u : 1u);
    EXPECT_EQ(r.llm_calls(), 3u);
    // The conversation: the root's turn 0 (its call, with its token ids), then this branch's own turns.
    ASSERT_EQ(messages.size(), 6);  // user, call, tool, call, tool, answer
    EXPECT_TRUE(messages[1].generated());
    EXPECT_FALSE(messages[1].token_ids().empty());
    EXPECT_TRUE(absl::StartsWith(messages[1].call_id(), "tree:g0:e0:r1/")) << messages[1].call_id();
    EXPECT_TRUE(absl::StartsWith(messages[3].call_id(), absl::StrCat("tree:g0:e", i, ":r1/"))) << messages[3].call_id();
    EXPECT_FALSE(r.trajectory().branches(0).token_ids().empty());
    // What each cost: the root's 0.8 s of CPU before the split is its own, none of a child's; a child's calls
    // are its own two, the root's first one shared (not counted again); its files above a shared layer.
    const v1::EpisodeUsage& u = r.usage();
    ASSERT_TRUE(u.sandbox().has_cpu_time()) << "no cgroup here?";
    const double cpu = absl::ToDoubleSeconds(FromProto(u.sandbox().cpu_time()));
    if (i == 0) {
      EXPECT_GE(cpu, 0.8);
      EXPECT_EQ(u.model().calls(), 3u);
      EXPECT_FALSE(u.has_shared_model());
    } else {
      EXPECT_LT(cpu, 0.5);
      EXPECT_EQ(u.model().calls(), 2u);
      EXPECT_EQ(u.shared_model().calls(), 1u);
      EXPECT_GT(u.sandbox().shared_disk_bytes(), 0u);
    }
    EXPECT_EQ(u.tools().calls(), i == 0 ? 2u : 1u);  // the root's first call is before the split
  }
  EXPECT_EQ(sandboxes.size(), 4u);
  EXPECT_TRUE(NothingLeaked());
}

// A branching task's persistent python session is carried into every branch (a live fork): the variable the
// root set before the split is there in each branch's interpreter, which is that branch's own from then on.
TEST_F(SchedulerFixture, ABranchingTasksPythonSessionGoesOnInEveryBranch) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::Task task =
      Scripted("carry", v1::TOOL_KIND_CODE_INTERPRETER, true,
               {"x = 41\\nimport os\\nroot = os.getpid()", "x += 1\\n(x, os.getpid() != root)"}, "(42, True)");
  task.mutable_branch()->add_at()->set_turn(1);
  v1::BatchSpec spec;
  spec.set_batch_id("carry");
  spec.set_group_size(3);
  ASSERT_THAT(Submit(spec, {task}), IsOk());
  auto results = Results("carry");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 3u);
  for (const auto& r : *results) {
    SCOPED_TRACE(absl::StrCat(r.ids().episode_id(), ": ", r.failure_message()));
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    ASSERT_GE(r.trajectory().branches_size(), 1);
    const auto& messages = r.trajectory().branches(0).messages();
    // x went from the root's 41 to 42 in each branch alone (not 43, 44: no branch saw another's change), in an
    // interpreter of its own except for the root's own line (e0 goes on in the root's process).
    const std::string answer(absl::StripAsciiWhitespace(messages.rbegin()->message().content()));
    EXPECT_EQ(answer, r.ids().index_in_group() == 0 ? "done: (42, False)" : "done: (42, True)");
  }
  EXPECT_TRUE(NothingLeaked());
}

// A stdio MCP server with state (a running total), as small as the protocol allows: one thread, its streams.
constexpr char kCounterServer[] = R"(import json, sys
total = 0
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "counter", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": [{"name": "add", "description": "adds n to the total",
                        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}]}
    else:
        total += m["params"]["arguments"]["n"]
        r = {"content": [{"type": "text", "text": str(total)}]}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
)";

// A branching task's persistent python session and stdio MCP server are both carried into every branch: each
// branch finds the root's variable and the server's total as they were at the split, and changes its own.
TEST_F(SchedulerFixture, ABranchingTasksSessionAndMcpServerGoOnInEveryBranch) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::Task task = Scripted("carry-mcp", v1::TOOL_KIND_CODE_INTERPRETER, true, {}, "6");
  task.mutable_llm()->set_params_json(R"({"fake": {"tool_script": [
      {"tool": "python", "args": {"code": "x = 41"}},
      {"tool": "counter__add", "args": {"n": 5}},
      {"tool": "python", "args": {"code": "x += 1\nx"}},
      {"tool": "counter__add", "args": {"n": 1}}]}})");
  task.mutable_tool_loop()->set_max_turns(5);
  v1::McpServerSpec* counter = task.add_mcp_servers();
  counter->set_name("counter");
  for (const char* arg : {"python3", "-u", "-c", kCounterServer}) counter->mutable_command()->add_argv(arg);
  task.mutable_branch()->add_at()->set_turn(2);
  v1::BatchSpec spec;
  spec.set_batch_id("carry-mcp");
  spec.set_group_size(3);
  ASSERT_THAT(Submit(spec, {task}), IsOk());
  auto results = Results("carry-mcp");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 3u);
  std::set<std::string> sandboxes;
  for (const auto& r : *results) {
    SCOPED_TRACE(absl::StrCat(r.ids().episode_id(), ": ", r.failure_message()));
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED);
    sandboxes.insert(r.sandbox_id());
    std::vector<std::string> answers;
    for (const auto& m : r.trajectory().branches(0).messages()) {
      if (m.message().role() == "tool") answers.emplace_back(absl::StripAsciiWhitespace(m.message().content()));
    }
    // 42 and 6 in every branch: the root's 41 and 5 went on in each alone (no 43, no 7).
    EXPECT_THAT(answers, ::testing::ElementsAre("", "5", "42", "6"));
    EXPECT_EQ(r.reward(), 1.0);
  }
  EXPECT_EQ(sandboxes.size(), 3u);
  EXPECT_TRUE(NothingLeaked());
}

TEST_F(SchedulerFixture, SubmitRefusesABranchThatDoesNotFitTheGroup) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  v1::Task task = Scripted("tree", v1::TOOL_KIND_BASH, false, {"true"}, "");
  v1::BranchPoint* at = task.mutable_branch()->add_at();
  at->set_turn(1);
  at->set_count(3);
  v1::BatchSpec spec;
  spec.set_group_size(4);
  auto submitted = Submit(spec, {task});
  EXPECT_EQ(submitted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      submitted.status().message(),
      ::testing::HasSubstr("task 'tree': branch.at: the counts (3) must multiply to the batch's group_size (4)"));
}

}  // namespace
}  // namespace corral
