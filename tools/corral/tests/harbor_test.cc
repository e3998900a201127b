#include "tools/corral/harbor.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

class HarborTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            absl::StrCat("corral-harbor-test-", getpid(), "-", ::testing::UnitTest::GetInstance()->random_seed());
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& rel, const std::string& content) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << content;
  }
  fs::path root_;
};

TEST_F(HarborTest, ATaskDirectoryBecomesAnAgentTaskLikeTheSdkReadsIt) {
  Write("fix-sum/task.toml",
        "version = \"1.0\"\n[metadata]\ndifficulty = \"easy\"  # comment\ntags = ['py', \"bug\"]\n"
        "[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 30\n[environment]\nmemory_mb = 512\n"
        "build_timeout_sec = 600\n");
  Write("fix-sum/instruction.md", "Fix sum.py so that it prints 5.\n");
  Write("fix-sum/environment/Dockerfile",
        "FROM python:3.11-slim\nWORKDIR /app\nENV MODE=test LEVEL=\"a b\"\nCOPY src/ /app/\n"
        "COPY --chown=1 run.sh /usr/local/bin/run\nRUN python3 -c 'print(1)' \\\n && true\n");
  Write("fix-sum/environment/src/sum.py", "print(2 + 2)\n");
  Write("fix-sum/environment/run.sh", "#!/bin/sh\n");
  Write("fix-sum/tests/test.sh", "exit 0\n");
  Write("fix-sum/solution/solve.sh", "sed -i s/2/3/ /app/sum.py\n");
  auto task = LoadHarborTask((root_ / "fix-sum").string(), "my-agent --fast");
  ASSERT_THAT(task, IsOk());
  EXPECT_EQ(task->id(), "fix-sum");
  EXPECT_EQ(task->runner(), v1::RUNNER_AGENT);
  EXPECT_EQ(task->prompt(), "Fix sum.py so that it prints 5.\n");
  EXPECT_THAT(task->agent().command().argv(), ElementsAre("bash", "-c", "my-agent --fast"));
  const v1::EnvironmentSpec& env = task->environment();
  EXPECT_EQ(env.workdir(), "/app");
  EXPECT_THAT(env.task_paths(), ElementsAre("/workspace", "/logs", "/app"));
  EXPECT_EQ(env.env().at("MODE"), "test");
  EXPECT_EQ(env.env().at("LEVEL"), "a b");
  ASSERT_EQ(env.setup_files_size(), 2);
  EXPECT_EQ(env.setup_files(0).path(), "/app/sum.py");
  EXPECT_EQ(env.setup_files(0).content(), "print(2 + 2)\n");
  EXPECT_EQ(env.setup_files(1).path(), "/usr/local/bin/run");
  ASSERT_EQ(env.setup_commands_size(), 1);
  EXPECT_THAT(env.setup_commands(0).argv(), ElementsAre("bash", "-c", "python3 -c 'print(1)'   && true"));
  EXPECT_EQ(env.setup_commands(0).cwd(), "/app");
  EXPECT_EQ(env.limits().memory_bytes(), 512u << 20);
  ASSERT_EQ(task->verifier().files_size(), 1);                        // solution/ is never sent
  EXPECT_EQ(task->verifier().files(0).path(), "/app/tests/test.sh");  // where the verifier runs
  // Whatever the agent left in tests/ is removed before the task's own tests go in.
  ASSERT_EQ(task->verifier().replace_paths_size(), 1);
  EXPECT_EQ(task->verifier().replace_paths(0), "/app/tests");
  EXPECT_EQ(task->timeouts().agent().seconds(), 120);
  EXPECT_EQ(task->timeouts().verifier().seconds(), 30);
  EXPECT_EQ(task->timeouts().setup().seconds(), 600);
  EXPECT_EQ(task->metadata_json(), R"({"difficulty":"easy","tags":["py","bug"],"image":"python:3.11-slim"})");
}

TEST_F(HarborTest, WithImagesTheLastFromIsTheImageAndADockerImageIsUsedAsIs) {
  Write("t/instruction.md", "Fix it.\n");
  Write("t/environment/Dockerfile",
        "FROM golang:1.22 AS build\nRUN go build ./...\nFROM --platform=linux/amd64 python:3.11-slim\nWORKDIR /app\n"
        "ENV MODE=test\n"
        "COPY src/ /app/\nRUN pip install -e .\n");
  Write("t/environment/src/setup.py", "# setup\n");
  auto task = LoadHarborTask((root_ / "t").string(), "agent", /*use_image=*/true);
  ASSERT_THAT(task, IsOk());
  const v1::EnvironmentSpec& env = task->environment();
  EXPECT_EQ(env.image(), "python:3.11-slim");  // the last stage is what runs; the build stage's RUN is not setup
  ASSERT_EQ(env.setup_commands_size(), 1);
  EXPECT_THAT(env.setup_commands(0).argv(), ElementsAre("bash", "-c", "pip install -e ."));
  ASSERT_EQ(env.setup_files_size(), 1);
  EXPECT_EQ(env.setup_files(0).path(), "/app/setup.py");
  EXPECT_EQ(env.workdir(), "/app");
  EXPECT_EQ(env.env().at("MODE"), "test");
  // Without images the same task runs on the host's filesystem and the FROM is only metadata.
  auto plain = LoadHarborTask((root_ / "t").string(), "agent");
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(plain->environment().image(), "");
  EXPECT_EQ(plain->environment().setup_commands_size(), 2);

  // A prebuilt docker_image is the image as is: the Dockerfile's RUN and COPY are already in it.
  Write("t/task.toml", "[environment]\ndocker_image = \"registry.example/t:1\"\n");
  auto prebuilt = LoadHarborTask((root_ / "t").string(), "agent", /*use_image=*/true);
  ASSERT_THAT(prebuilt, IsOk());
  EXPECT_EQ(prebuilt->environment().image(), "registry.example/t:1");
  EXPECT_EQ(prebuilt->environment().setup_commands_size(), 0);
  EXPECT_EQ(prebuilt->environment().setup_files_size(), 0);
  EXPECT_EQ(prebuilt->environment().workdir(), "/app");
  EXPECT_THAT(prebuilt->metadata_json(), HasSubstr(R"("image":"registry.example/t:1")"));

  // COPY --from another stage needs a real build: refused, naming the line.
  Write("t/task.toml", "");
  Write("t/environment/Dockerfile", "FROM a AS build\nFROM b\nCOPY --from=build /out /app\n");
  EXPECT_THAT(LoadHarborTask((root_ / "t").string(), "agent", true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("COPY --from=build /out /app")));
  // Nothing of an earlier stage carries into the last one; building FROM an earlier stage needs a real build.
  Write("t/environment/Dockerfile", "FROM golang AS build\nWORKDIR /src\nENV CGO_ENABLED=0\nFROM python\nRUN true\n");
  auto staged = LoadHarborTask((root_ / "t").string(), "agent", true);
  ASSERT_THAT(staged, IsOk());
  EXPECT_EQ(staged->environment().image(), "python");
  EXPECT_EQ(staged->environment().workdir(), "");
  EXPECT_FALSE(staged->environment().env().contains("CGO_ENABLED"));
  EXPECT_THAT(staged->environment().task_paths(), ::testing::Not(::testing::Contains("/src")));
  Write("t/environment/Dockerfile", "FROM golang AS build\nRUN make\nFROM build\n");
  EXPECT_THAT(LoadHarborTask((root_ / "t").string(), "agent", true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("FROM build builds on an earlier stage")));
  Write("t/task.toml", "[environment]\ndocker_image = 3\n");
  EXPECT_THAT(LoadHarborTask((root_ / "t").string(), "agent", true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("docker_image must be a name")));
}

TEST_F(HarborTest, ADirectoryOfTasksLoadsEachByNameAndRefusesWhatIsNotATask) {
  Write("b-task/instruction.md", "second");
  Write("a-task/instruction.md", "first");
  Write("a-task/environment/data.txt", "42");
  Write("notes/readme.md", "not a task");
  auto tasks = LoadHarborTasks(root_.string(), "agent");
  ASSERT_THAT(tasks, IsOk());
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].id(), "a-task");
  // No Dockerfile: environment/ is uploaded as is, to the working directory where the agent and verifier run.
  ASSERT_EQ((*tasks)[0].environment().files_size(), 1);
  EXPECT_EQ((*tasks)[0].environment().files(0).path(), "/workspace/data.txt");
  EXPECT_EQ((*tasks)[0].verifier().files_size(), 0);
  EXPECT_EQ((*tasks)[1].id(), "b-task");
  EXPECT_THAT(LoadHarborTask((root_ / "notes").string(), "agent"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no instruction.md")));
  EXPECT_THAT(LoadHarborTasks((root_ / "notes").string(), "agent"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no Harbor task directories")));
}

TEST_F(HarborTest, AnInputIsADatasetFileOrTaskDirectoriesWhichNeedAnAgent) {
  Write("data.jsonl", "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"b\", \"prompt\": \"y\"}\n");
  Write("tasks/one/instruction.md", "first");
  auto jsonl = LoadTaskInput((root_ / "data.jsonl").string(), "");
  ASSERT_THAT(jsonl, IsOk());
  EXPECT_EQ(jsonl->size(), 2u);
  EXPECT_THAT(LoadTaskInput((root_ / "tasks").string(), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--agent")));
  auto dir = LoadTaskInput((root_ / "tasks").string(), "agent");
  ASSERT_THAT(dir, IsOk());
  EXPECT_EQ(dir->size(), 1u);
  auto one = LoadTaskInput((root_ / "tasks" / "one").string(), "agent");
  ASSERT_THAT(one, IsOk());
  EXPECT_EQ((*one)[0].id(), "one");
}

TEST_F(HarborTest, AHarnessNameAsTheAgentIsTheHarnessElseACommand) {
  Write("tasks/one/instruction.md", "first");
  Write("data.jsonl",
        "{\"id\": \"a\", \"prompt\": \"x\", \"runner\": \"agent\"}\n"
        "{\"id\": \"b\", \"prompt\": \"y\", \"runner\": \"agent\", \"agent\": {\"harness\": \"opencode\"}}\n"
        "{\"id\": \"c\", \"prompt\": \"z\"}\n");
  auto harbor = LoadTaskInput((root_ / "tasks").string(), "claude-code");
  ASSERT_THAT(harbor, IsOk());
  EXPECT_EQ((*harbor)[0].agent().harness(), "claude-code");
  EXPECT_TRUE((*harbor)[0].agent().command().argv().empty());
  auto pinned = LoadTaskInput((root_ / "tasks").string(), "codex@0.169.0");
  ASSERT_THAT(pinned, IsOk());
  EXPECT_EQ((*pinned)[0].agent().harness(), "codex@0.169.0");
  auto command = LoadTaskInput((root_ / "tasks").string(), "codex --model x");
  ASSERT_THAT(command, IsOk());
  EXPECT_THAT((*command)[0].agent().command().argv(), ElementsAre("bash", "-c", "codex --model x"));
  // A dataset: --agent goes to the agent tasks that name no agent of their own.
  auto jsonl = LoadTaskInput((root_ / "data.jsonl").string(), "codex");
  ASSERT_THAT(jsonl, IsOk());
  ASSERT_EQ(jsonl->size(), 3u);
  EXPECT_EQ((*jsonl)[0].agent().harness(), "codex");
  EXPECT_EQ((*jsonl)[1].agent().harness(), "opencode");
  EXPECT_FALSE((*jsonl)[2].has_agent());
}

TEST_F(HarborTest, AgentFilesGoNextToWhereTheAgentRuns) {
  Write("tasks/one/instruction.md", "first");
  Write("agent.py", "print('hi')\n");
  Write("data.jsonl", "{\"id\": \"a\", \"prompt\": \"x\"}\n");
  const std::string agent = (root_ / "agent.py").string();
  auto tasks = LoadTaskInput((root_ / "tasks").string(), "python3 .corral/agent/agent.py", {agent});
  ASSERT_THAT(tasks, IsOk());
  ASSERT_EQ((*tasks)[0].environment().files_size(), 1);
  const v1::InlineFile& f = (*tasks)[0].environment().files(0);
  EXPECT_EQ(f.path(), "/workspace/.corral/agent/agent.py");
  EXPECT_EQ(f.content(), "print('hi')\n");
  EXPECT_EQ(f.permissions(), 0755u);
  EXPECT_THAT(LoadTaskInput((root_ / "tasks").string(), "a", {(root_ / "missing.py").string()}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LoadTaskInput((root_ / "data.jsonl").string(), "", {agent}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--agent-file")));
}

TEST(TomlTest, ReadsTablesAndScalarsAndNamesTheBadLine) {
  auto parsed = ParseToml("a = 1\n# c\n[t]\nb = 'x y'\nc = true\nd = [1, 2]\n");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(*parsed, ElementsAre(Pair("a", "1"), Pair("t.b", "\"x y\""), Pair("t.c", "true"), Pair("t.d", "[1,2]")));
  EXPECT_THAT(ParseToml("[t]\nbroken\n"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2")));
  EXPECT_THAT(ParseToml("a = 1\na = 2\n"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2")));
}

TEST(TomlTest, ReadsWhatTaskFilesWriteBeyondFlatTables) {
  // Nested and dotted tables, inline tables (flattened as the tables they are), multi-line strings and arrays,
  // dates: all TOML, all read.
  auto parsed = ParseToml(
      "[metadata]\nauthor.name = \"Ada\"\ntags = [\n  \"a\",\n  \"b\",\n]\n"
      "[environment]\nlimits = { cpus = 2 }\nnote = \"\"\"two\nlines\"\"\"\nwhen = 1979-05-27\n");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(*parsed,
              UnorderedElementsAre(Pair("metadata.author.name", "\"Ada\""), Pair("metadata.tags", "[\"a\",\"b\"]"),
                                   Pair("environment.limits.cpus", "2"), Pair("environment.note", "\"two\\nlines\""),
                                   Pair("environment.when", "\"1979-05-27\"")));
}

TEST(ShellWordsTest, QuotesGroupAndEscapesWork) {
  EXPECT_THAT(ShellWords(R"(a 'b c' "d \"e\"" f)"), ElementsAre("a", "b c", "d \"e\"", "f"));
  EXPECT_THAT(ShellWords("  "), ElementsAre());
}

}  // namespace
}  // namespace corral::cli
