// The runners that keep a process open in the sandbox — persistent tools, MCP servers over stdio, the
// environment relay — against scripted interactive processes on the FakeClock: a crash, a hang, a malformed
// answer, a restart and a stop, each in milliseconds.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "libs/api/proto_time.h"
#include "services/scheduler/tests/episode_driver_fixture.h"

namespace corral::scheduler {
namespace {

using namespace driver_test;  // NOLINT: the fixture and its helpers
using ::testing::HasSubstr;
using ::testing::SizeIs;
namespace json = boost::json;

// A tool loop whose one tool is a persistent bash session, with a 10 s tool timeout; reward 1 for "done".
v1::Task PersistentBash() {
  v1::Task t;
  t.set_id("t0");
  t.set_prompt("Work in the shell.");
  t.set_runner(v1::RUNNER_TOOL_LOOP);
  v1::ToolSpec* bash = t.mutable_tool_loop()->add_tools();
  bash->set_name("bash");
  bash->set_kind(v1::TOOL_KIND_BASH);
  bash->set_persistent(true);
  t.mutable_tool_loop()->set_max_turns(6);
  ToProto(absl::Seconds(10), t.mutable_timeouts()->mutable_tool());
  t.mutable_reward()->set_function(v1::REWARD_FUNCTION_EXACT);
  t.set_answer("done");
  return t;
}

// What the persistent bash driver prints after a command's output.
std::string BashEnd(const sandbox::FakeInteractive& p, int status = 0) {
  return absl::StrCat("\n__CORRAL_STATUS ", status, "\n", p.env("__CORRAL_MARK"), "\n");
}

// The tool messages the model was sent, in order (from the last LLM request, which carries them all).
std::vector<std::string> ToolMessages(const FakeProxy& proxy) {
  std::vector<std::string> out;
  const std::vector<std::string> bodies = proxy.bodies();
  if (bodies.empty()) return out;
  const json::value last = json::parse(bodies.back());
  for (const json::value& m : last.at("messages").as_array()) {
    if (m.at("role") == "tool") out.emplace_back(m.at("content").as_string());
  }
  return out;
}

class ResidentRunnersTest : public EpisodeDriverTest {};

TEST_F(ResidentRunnersTest, APersistentShellKeepsItsStateAcrossCallsAndIsStoppedWithTheAttempt) {
  std::map<std::string, std::string> vars;  // the shell's state, as the script plays it
  host().OnInteractive([&vars](const v1::ExecRequest&) {
    return sandbox::FakeInteractive::Script{
        .on_write = [&vars](sandbox::FakeInteractive& p, const std::string& written) {
          const std::string command = written.substr(0, written.find('\0'));
          if (absl::StartsWith(command, "x=")) {
            vars["x"] = command.substr(2);
            p.Emit(BashEnd(p));
          } else {
            p.Emit(absl::StrCat(vars["x"], "\n", BashEnd(p)));  // (the last marker's newline comes first)
          }
        }};
  });
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "x=5"})"));
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "echo $x"})"));
  proxy_->Reply(ChatCompletion("done"));
  Start(PersistentBash());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 1.0);
  ASSERT_THAT(host().interactive(), SizeIs(1));  // one session served both calls
  const sandbox::FakeInteractive& shell = *host().interactive()[0];
  EXPECT_EQ(shell.start().command().argv(0), "bash");
  EXPECT_EQ(shell.start().command().argv(3), "-c");
  EXPECT_THAT(shell.start().command().argv(4), HasSubstr("__CORRAL_STATUS"));  // the embedded driver
  EXPECT_THAT(shell.env("__CORRAL_MARK"), ::testing::StartsWith("__CORRAL_DONE_"));
  EXPECT_THAT(shell.writes(), ::testing::ElementsAre(std::string("x=5") + '\0', std::string("echo $x") + '\0'));
  EXPECT_THAT(ToolMessages(*proxy_), ::testing::ElementsAre("", "5"));
  EXPECT_TRUE(shell.stopped());
}

TEST_F(ResidentRunnersTest, ACallPastItsTimeoutIsInterruptedAndASessionThatDoesNotRecoverIsReplaced) {
  int started = 0;
  host().OnInteractive([&started](const v1::ExecRequest&) {
    const bool first = ++started == 1;
    return sandbox::FakeInteractive::Script{.on_write =
                                                [first](sandbox::FakeInteractive& p, const std::string&) {
                                                  if (!first)
                                                    p.Emit(absl::StrCat("fresh\n", BashEnd(p)));  // the first hangs
                                                },
                                            .on_signal = [](sandbox::FakeInteractive&, int) {}};  // and ignores SIGINT
  });
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "sleep 1000"})"));
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "echo fresh"})"));
  proxy_->Reply(ChatCompletion("done"));
  Start(PersistentBash());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  ASSERT_THAT(host().interactive(), SizeIs(2));
  EXPECT_THAT(host().interactive()[0]->signals(), ::testing::ElementsAre(2));  // SIGINT, then 5 s of grace
  EXPECT_TRUE(host().interactive()[0]->stopped());
  const std::vector<std::string> tools = ToolMessages(*proxy_);
  ASSERT_THAT(tools, SizeIs(2));
  EXPECT_THAT(tools[0], HasSubstr("timed out after 10s; the session did not recover and was restarted"));
  EXPECT_EQ(tools[1], "fresh");
}

TEST_F(ResidentRunnersTest, ASessionThatExitsIsStartedAgainOnTheNextCall) {
  int started = 0;
  host().OnInteractive([&started](const v1::ExecRequest&) {
    const bool first = ++started == 1;
    return sandbox::FakeInteractive::Script{.on_write = [first](sandbox::FakeInteractive& p, const std::string&) {
      if (first) {
        p.Emit("bye\n");
        p.Exit();
      } else {
        p.Emit(absl::StrCat("again\n", BashEnd(p)));
      }
    }};
  });
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "exit"})"));
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "echo again"})"));
  proxy_->Reply(ChatCompletion("done"));
  Start(PersistentBash());
  RunToEnd();
  EXPECT_EQ(Journaled().status(), v1::EPISODE_STATUS_FINISHED);
  ASSERT_THAT(host().interactive(), SizeIs(2));
  const std::vector<std::string> tools = ToolMessages(*proxy_);
  ASSERT_THAT(tools, SizeIs(2));
  EXPECT_THAT(tools[0], HasSubstr("bye\n[the process exited; the next call starts a new one]"));
  EXPECT_EQ(tools[1], "again");
}

TEST_F(ResidentRunnersTest, ASessionTheHostCannotStartIsAnInfraFailure) {
  host().FailInteractive(absl::UnavailableError("the host is restarting"));
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "ls"})"));
  Start(PersistentBash(), "b", /*max_attempts=*/1);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_TOOL);
  EXPECT_THAT(r.failure_message(), HasSubstr("starting the bash session"));
}

TEST_F(ResidentRunnersTest, ACancelMidCallStopsTheSessionAndEndsTheEpisodeCancelled) {
  host().OnInteractive([](const v1::ExecRequest&) { return sandbox::FakeInteractive::Script{}; });  // never answers
  proxy_->Reply(ToolCallCompletion("bash", R"({"command": "sleep 1000"})"));
  const EpisodeTicket ticket = Start(PersistentBash());
  RunUntil([&] { return !host().interactive().empty() && !host().interactive()[0]->writes().empty(); });
  ticket.control->Stop(StopReason::kCancelled, "the trainer cancelled");
  RunToEnd();
  EXPECT_EQ(Journaled().status(), v1::EPISODE_STATUS_CANCELLED);
  EXPECT_TRUE(host().interactive()[0]->stopped());
  EXPECT_THAT(host().interactive()[0]->signals(), ::testing::IsEmpty());  // stopped, not interrupted
}

// ---- MCP tool servers over stdio

v1::Task WithMcp() {
  v1::Task t = PersistentBash();
  t.mutable_tool_loop()->clear_tools();
  v1::McpServerSpec* files = t.add_mcp_servers();
  files->set_name("files");
  files->mutable_command()->add_argv("mcp-files");
  return t;
}

// A stdio MCP server with one tool, "read", answering `text` (or hanging, or exiting, as `call` says).
struct McpScript {
  enum class Call { kAnswer, kHang, kExit } call = Call::kAnswer;
  std::string text = "contents of notes.txt";
  std::vector<std::string> methods;  // every request's method, as received
};

sandbox::FakeInteractive::Script McpServer(McpScript* s) {
  return sandbox::FakeInteractive::Script{.on_write = [s](sandbox::FakeInteractive& p, const std::string& written) {
    for (absl::string_view line : absl::StrSplit(written, '\n', absl::SkipEmpty())) {
      json::object request = json::parse(json::string_view(line.data(), line.size())).as_object();
      const std::string method(request.at("method").as_string());
      s->methods.push_back(method);
      if (!request.contains("id")) continue;  // a notification
      json::object answer{{"jsonrpc", "2.0"}, {"id", request.at("id")}};
      if (method == "initialize") {
        answer["result"] = json::object{{"protocolVersion", "2025-06-18"}, {"capabilities", json::object()}};
      } else if (method == "tools/list") {
        answer["result"] =
            json::object{{"tools", json::array{json::object{{"name", "read"},
                                                            {"description", "Reads a file."},
                                                            {"inputSchema", json::object{{"type", "object"}}}}}}};
      } else if (s->call == McpScript::Call::kHang) {
        continue;
      } else if (s->call == McpScript::Call::kExit) {
        s->call = McpScript::Call::kAnswer;  // the next server answers
        p.Exit();
        return;
      } else {
        answer["result"] = json::object{{"content", json::array{json::object{{"type", "text"}, {"text", s->text}}}}};
      }
      p.Emit(json::serialize(answer) + "\n");
    }
  }};
}

TEST_F(ResidentRunnersTest, AnMcpServersToolsAreOfferedAndItsAnswersGoBackToTheModel) {
  McpScript script;
  host().OnInteractive([&script](const v1::ExecRequest&) { return McpServer(&script); });
  proxy_->Reply(ToolCallCompletion("files__read", R"({"path": "notes.txt"})"));
  proxy_->Reply(ChatCompletion("done"));
  Start(WithMcp());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.tool_calls(), 1u);
  ASSERT_THAT(host().interactive(), SizeIs(1));
  const v1::Command& command = host().interactive()[0]->start().command();
  ASSERT_GE(command.argv_size(), 5);
  EXPECT_EQ(command.argv(2), "exec \"$@\" 2>>\"$0\"");  // stderr to the log, stdout the protocol's
  EXPECT_THAT(command.argv(3), HasSubstr(".corral/mcp-files.log"));
  EXPECT_EQ(command.argv(4), "mcp-files");
  EXPECT_THAT(script.methods,
              ::testing::ElementsAre("initialize", "notifications/initialized", "tools/list", "tools/call"));
  EXPECT_THAT(proxy_->bodies().front(), HasSubstr(R"("name":"files__read")"));
  EXPECT_THAT(ToolMessages(*proxy_), ::testing::ElementsAre("contents of notes.txt"));
}

TEST_F(ResidentRunnersTest, AnMcpServerThatExitsMidCallIsStartedAgainAndTheModelIsTold) {
  McpScript script;
  script.call = McpScript::Call::kExit;
  host().OnInteractive([&script](const v1::ExecRequest&) { return McpServer(&script); });
  proxy_->Reply(ToolCallCompletion("files__read", R"({"path": "a"})"));
  proxy_->Reply(ToolCallCompletion("files__read", R"({"path": "b"})"));
  proxy_->Reply(ChatCompletion("done"));
  Start(WithMcp());
  RunToEnd();
  EXPECT_EQ(Journaled().status(), v1::EPISODE_STATUS_FINISHED);
  ASSERT_THAT(host().interactive(), SizeIs(2));  // started again for the second call, and initialized
  EXPECT_EQ(std::count(script.methods.begin(), script.methods.end(), "initialize"), 2);
  EXPECT_THAT(ToolMessages(*proxy_),
              ::testing::ElementsAre("error: the MCP server 'files' exited; the next call starts it again",
                                     "contents of notes.txt"));
}

TEST_F(ResidentRunnersTest, AnMcpCallPastItsTimeoutIsCancelledAndTheServerKept) {
  McpScript script;
  script.call = McpScript::Call::kHang;
  host().OnInteractive([&script](const v1::ExecRequest&) { return McpServer(&script); });
  proxy_->Reply(ToolCallCompletion("files__read", R"({"path": "a"})"));
  proxy_->Reply(ChatCompletion("done"));
  Start(WithMcp());
  RunToEnd();
  EXPECT_EQ(Journaled().status(), v1::EPISODE_STATUS_FINISHED);
  ASSERT_THAT(host().interactive(), SizeIs(1));
  EXPECT_EQ(script.methods.back(), "notifications/cancelled");
  EXPECT_THAT(ToolMessages(*proxy_), ::testing::ElementsAre("error: the call timed out after 10s and was cancelled"));
}

TEST_F(ResidentRunnersTest, AnMcpServerThatNeverAnswersInitializeFailsTheEpisodeAsTheEnvironments) {
  host().OnInteractive([](const v1::ExecRequest&) { return sandbox::FakeInteractive::Script{}; });
  Start(WithMcp());
  RunToEnd(absl::Seconds(1));
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FAILED);
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_ENVIRONMENT);
  EXPECT_THAT(r.failure_message(), HasSubstr("MCP server 'files': no answer to initialize within 1m"));
  EXPECT_TRUE(host().interactive()[0]->stopped());
  EXPECT_EQ(proxy_->calls(), 0);  // the model was never asked
}

TEST_F(ResidentRunnersTest, AnMcpServerThatCannotStartIsTheEnvironmentsFault) {
  host().FailInteractive(absl::NotFoundError("mcp-files: no such program"));
  Start(WithMcp());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_ENVIRONMENT);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_ENVIRONMENT);
  EXPECT_THAT(r.failure_message(), HasSubstr("MCP server 'files' could not start: mcp-files: no such program"));
}

// ---- the environment runner, through the relay

v1::Task Environment() {
  v1::Task t;
  t.set_id("t0");
  t.set_runner(v1::RUNNER_ENVIRONMENT);
  v1::EnvServerSpec* env = t.mutable_env_server();
  env->mutable_command()->add_argv("env-server");
  env->set_port(8000);
  env->set_max_turns(4);
  ToProto(absl::Seconds(10), env->mutable_step_timeout());
  return t;
}

// The relay as the runner sees it: each request is a JSON line, each answer a JSON line and the marker. `step`
// answers POST /step (the relay's JSON answer, or nullopt to hang).
using StepAnswer = std::function<std::optional<json::object>(int step)>;
sandbox::FakeInteractive::Script Relay(StepAnswer step, std::vector<std::string>* paths) {
  auto steps = std::make_shared<int>(0);
  return sandbox::FakeInteractive::Script{
      .on_write = [step, paths, steps](sandbox::FakeInteractive& p, const std::string& written) {
        const std::string mark(json::parse(p.env("__CORRAL_RELAY")).at("mark").as_string());
        json::object request = json::parse(written).as_object();
        std::optional<json::object> answer;
        if (request.contains("wait")) {
          answer = json::object{{"status", 200}, {"body", "ok"}};
        } else if (request.contains("open")) {
          answer = json::object{{"transport", "http"}};
        } else {
          const std::string path = absl::StrCat("/", std::string(request.at("env").as_string()));
          paths->push_back(path);
          if (path == "/reset") {
            answer = json::object{{"status", 200}, {"body", R"({"observation": {"text": "start"}, "done": false})"}};
          } else {
            answer = step(++*steps);
          }
        }
        if (answer) p.Emit(absl::StrCat(json::serialize(*answer), "\n", mark, "\n"));
      }};
}

json::object StepBodyAnswer(double reward, bool done) {
  return json::object{{"status", 200},
                      {"body", absl::StrCat(R"({"observation": {"text": "ok"}, "reward": )", reward, R"(, "done": )",
                                            done ? "true" : "false", "}")}};
}

TEST_F(ResidentRunnersTest, AnEnvironmentEpisodeResetsThenStepsUntilDoneAndSumsTheRewards) {
  std::vector<std::string> paths;
  host().OnInteractive([&paths](const v1::ExecRequest&) {
    return Relay([](int step) { return StepBodyAnswer(0.5, step == 2); }, &paths);
  });
  proxy_->Reply(ChatCompletion("move"));
  Start(Environment());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
  EXPECT_EQ(r.reward(), 1.0);
  EXPECT_THAT(r.step_rewards(), ::testing::ElementsAre(0.5, 0.5));
  EXPECT_THAT(paths, ::testing::ElementsAre("/reset", "/step", "/step"));
  ASSERT_THAT(host().interactive(), SizeIs(1));
  const v1::Command& relay = host().interactive()[0]->start().command();
  EXPECT_EQ(relay.argv(0), "python3");
  EXPECT_THAT(relay.argv(3), HasSubstr("def call(req):"));  // the embedded relay
  EXPECT_TRUE(host().interactive()[0]->stopped());
}

TEST_F(ResidentRunnersTest, AServerThatExitsIsInfraWithItsLogAndTheRelayIsStopped) {
  std::vector<std::string> paths;
  host().OnInteractive([&paths](const v1::ExecRequest&) {
    return Relay(
        [](int) {
          return json::object{{"error", "the server exited with code 1"}, {"exited", true}, {"log", "Traceback: boom"}};
        },
        &paths);
  });
  proxy_->Reply(ChatCompletion("move"));
  Start(Environment(), "b", /*max_attempts=*/1);
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_EQ(r.failed_phase(), v1::EPISODE_PHASE_ENVIRONMENT);
  EXPECT_THAT(r.failure_message(), HasSubstr("POST /step: the server exited with code 1"));
  EXPECT_THAT(r.failure_message(), HasSubstr("Traceback: boom"));
  EXPECT_TRUE(host().interactive()[0]->stopped());
}

TEST_F(ResidentRunnersTest, AMalformedAnswerIsTheEnvironmentsFaultNamingTheField) {
  std::vector<std::string> paths;
  host().OnInteractive([&paths](const v1::ExecRequest&) {
    return Relay(
        [](int) {
          return json::object{{"status", 200}, {"body", R"({"observation": 1, "done": "yes"})"}};
        },
        &paths);
  });
  proxy_->Reply(ChatCompletion("move"));
  Start(Environment());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_ENVIRONMENT);
  EXPECT_THAT(r.failure_message(), HasSubstr("done"));
}

TEST_F(ResidentRunnersTest, AStepThatNeverAnswersEndsAsInfraAfterItsTimeout) {
  std::vector<std::string> paths;
  host().OnInteractive(
      [&paths](const v1::ExecRequest&) { return Relay([](int) { return std::optional<json::object>(); }, &paths); });
  proxy_->Reply(ChatCompletion("move"));
  Start(Environment(), "b", /*max_attempts=*/1);
  RunToEnd(absl::Seconds(1));
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_INFRA);
  EXPECT_THAT(r.failure_message(), HasSubstr("step: the environment server did not answer within 10s"));
  EXPECT_TRUE(host().interactive()[0]->stopped());
}

TEST_F(ResidentRunnersTest, ASandboxWithoutPythonCannotRunTheRelay) {
  host().FailInteractive(absl::NotFoundError("python3: not found"));
  Start(Environment());
  RunToEnd();
  const v1::EpisodeResult r = Journaled();
  EXPECT_EQ(r.failure_class(), v1::FAILURE_CLASS_ENVIRONMENT);
  EXPECT_THAT(r.failure_message(), HasSubstr("the environment relay needs python3 in the sandbox: python3: not found"));
}

}  // namespace
}  // namespace corral::scheduler
