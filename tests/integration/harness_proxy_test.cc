// The real agent harnesses (tests/harness, installed by scripts/test with `npm ci`: Claude Code, Codex CLI,
// OpenCode at the versions services/scheduler/harnesses.cc pins) against a real corral-proxy, started with the
// agent command the agent runner would give them, outside any sandbox. Behind the proxy corral-fake-llm plays
// the model (--shell-agent): it finds the harness's own shell tool in the request, calls it once with the task's
// command, then answers. Each harness must really run the command, exit 0 with the answer, and leave a
// trajectory with the upstream's token ids on every call, recorded under the API the harness speaks.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/harness/harnesses.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

namespace fs = std::filesystem;

constexpr char kInstruction[] =
    "Write the proof file, then say so.\nRUN: echo corral-harness-ok > proof.txt\nANSWER: The proof file is written.";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HarnessProxyTest : public ProxyFixture {
 protected:
  // Runs `name`'s agent command with the agent's variables pointing at a fresh session, in a fresh home and work
  // directory; returns the session's id.
  std::string RunHarness(const std::string& name) {
    const std::string bin = std::string(CORRAL_SOURCE_DIR) + "/tests/harness/node_modules/.bin";
    EXPECT_TRUE(fs::exists(bin)) << "run `npm ci --prefix tests/harness` (scripts/test does)";
    auto harness = ResolveHarness(name);
    EXPECT_THAT(harness, IsOk());
    if (!harness.ok()) return "";
    if (!proxy_) StartProxy({StartBackend(Recording(name, {"--shell-agent"}))});
    v1::SessionPolicy policy;
    (*policy.mutable_model_aliases())["*"] = "fake-model";
    policy.set_capture_token_ids(true);
    AddRoleRules(*harness->harness, policy);  // as the scheduler opens a harness's session
    const std::string env_id = "harness-" + name;
    const std::string token = Open(env_id, policy);
    work_ = dir_ + "/work-" + name;
    const std::string home = dir_ + "/home-" + name;
    fs::create_directories(work_);
    fs::create_directories(home);
    std::vector<std::string> argv = HarnessArgv(*harness);
    argv.back() = absl::StrCat("cd '", work_, "' || exit 1\n", argv.back());
    argv.insert(argv.begin(), {"/usr/bin/env", "-i", "PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + home,
                               "LANG=C.UTF-8", "CORRAL_HARNESS_ROOT=" + dir_ + "/no-harness-root",
                               "OPENAI_BASE_URL=http://" + proxy_->ready.http + "/v1", "OPENAI_API_KEY=" + token,
                               "OPENAI_MODEL=fake-model", std::string("CORRAL_INSTRUCTION=") + kInstruction});
    auto run = testing::Subprocess::Start(argv, dir_ + "/" + name + ".log");
    EXPECT_THAT(run, IsOk());
    if (!run.ok()) return env_id;
    auto status = run->Wait(absl::Seconds(120));
    EXPECT_THAT(status, IsOk());
    log_ = run->Log();
    EXPECT_EQ(status.value_or(-1), 0) << log_;
    return env_id;
  }

  // The backend's arguments, recording the requests it gets into tests/harness/fixtures/<name>.jsonl when
  // CORRAL_RECORD_HARNESS_REQUESTS is set (how those fixtures were made: see tests/harness/fixtures/README.md).
  static std::vector<std::string> Recording(const std::string& name, std::vector<std::string> args) {
    if (std::getenv("CORRAL_RECORD_HARNESS_REQUESTS") != nullptr) {
      const std::string log = std::string(CORRAL_SOURCE_DIR) + "/tests/harness/fixtures/" + name + ".jsonl";
      fs::remove(log);
      args.push_back("--request-log=" + log);
    }
    return args;
  }

  // What every harness must have done: run the command, print the answer, and left on each call the path it
  // took (a dialect's) and the upstream's token ids (which an upstream serving the dialect itself does not give).
  void ExpectTheTaskDone(const std::string& env_id, const std::string& endpoint, const std::string& path = "") {
    EXPECT_EQ(ReadFile(work_ + "/proof.txt"), "corral-harness-ok\n") << log_;
    EXPECT_THAT(log_, ::testing::HasSubstr("The proof file is written."));
    auto t = Trajectory(env_id);
    ASSERT_THAT(t, IsOk());
    EXPECT_GE(t->call_count(), 2u) << "a call for the tool, one for the answer";
    int on_endpoint = 0;
    for (const v1::LlmCall& call : t->calls()) {
      if (call.endpoint() != endpoint) continue;
      ++on_endpoint;
      EXPECT_EQ(call.error(), "");
      EXPECT_TRUE(call.has_response_message()) << "the answer is recorded";
      if (!path.empty()) {
        EXPECT_THAT(call.translation_json(), ::testing::HasSubstr("\"path\":\"" + path + "\""));
      }
      if (path != "native") {
        EXPECT_FALSE(call.completion_token_ids().empty()) << call.ShortDebugString();
      }
    }
    EXPECT_GE(on_endpoint, 2) << t->ShortDebugString();
    // One agent conversation: every agent call in one branch, anything else a side call.
    int agent_branches = 0;
    for (const v1::Branch& b : t->branches()) {
      EXPECT_THAT(b.role(), ::testing::AnyOf(v1::CALL_ROLE_AGENT, v1::CALL_ROLE_AUXILIARY)) << b.ShortDebugString();
      agent_branches += b.role() == v1::CALL_ROLE_AGENT ? 1 : 0;
    }
    EXPECT_EQ(agent_branches, 1) << t->ShortDebugString();
    EXPECT_GE(t->calls_by_role().agent(), 2u);
    EXPECT_EQ(t->calls_by_role().agent() + t->calls_by_role().auxiliary(), t->call_count());
    roles_ = *t;
  }

  v1::Trajectory roles_;  // the last run's trajectory, for a harness's own checks

  std::string work_, log_;
};

TEST_F(HarnessProxyTest, ClaudeCodeRunsItsBashToolThroughTheMessagesApi) {
  const std::string env_id = RunHarness("claude-code");
  ExpectTheTaskDone(env_id, "/v1/messages", "translated");
}

TEST_F(HarnessProxyTest, CodexRunsItsShellToolThroughTheResponsesApi) {
  const std::string env_id = RunHarness("codex");
  ExpectTheTaskDone(env_id, "/v1/responses", "translated");
}

// An upstream that serves /v1/responses itself (as vLLM and SGLang do), declared so: Codex's requests go to it
// untranslated, streamed back as they came, and are recorded from its answers.
TEST_F(HarnessProxyTest, CodexThroughAnUpstreamThatServesResponsesItselfGoesNative) {
  const std::string backend = StartBackend(Recording("codex", {"--shell-agent", "--native-responses"}));
  std::ofstream(dir_ + "/proxy.yaml") << "upstreams:\n  - {url: http://" << backend << ", dialects: [responses]}\n";
  StartProxy({}, {"--config=" + dir_ + "/proxy.yaml"});
  const std::string env_id = RunHarness("codex");
  ExpectTheTaskDone(env_id, "/v1/responses", "native");
  const HttpReply stats = Backend(backend, "/admin/stats");
  EXPECT_GE(boost::json::parse(stats.body).at("native_responses").as_int64(), 2) << stats.body;
  // A whole (unstreamed) call: the upstream's Response object as it came, the call recorded from it.
  v1::SessionPolicy policy;  // the policy's model goes into the untranslated body
  policy.add_allowed_models("fake-model");
  (*policy.mutable_model_aliases())["*"] = "fake-model";
  const std::string token = Open("native-whole", policy);
  const HttpReply whole = Post("/v1/responses", token, R"({"model": "gpt-5", "input": "hello there"})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  const boost::json::object response = boost::json::parse(whole.body).as_object();
  EXPECT_EQ(response.at("object").as_string(), "response");
  EXPECT_EQ(response.at("model").as_string(), "fake-model");
  EXPECT_THAT(whole.body, ::testing::HasSubstr("echo: hello there"));
  auto t = Trajectory("native-whole");
  ASSERT_THAT(t, IsOk());
  ASSERT_EQ(t->calls_size(), 1);
  EXPECT_EQ(t->calls(0).translation_json(), R"({"path":"native"})");
  EXPECT_EQ(t->calls(0).requested_model(), "gpt-5");
  EXPECT_GT(t->calls(0).usage().prompt_tokens(), 0u);
}

// The same with an upstream serving /v1/messages itself: Claude Code's calls pass through untranslated.
TEST_F(HarnessProxyTest, ClaudeCodeThroughAnUpstreamThatServesMessagesItselfGoesNative) {
  const std::string backend = StartBackend(Recording("claude-code", {"--shell-agent", "--native-messages"}));
  std::ofstream(dir_ + "/proxy.yaml") << "upstreams:\n  - {url: http://" << backend << ", dialects: [messages]}\n";
  StartProxy({}, {"--config=" + dir_ + "/proxy.yaml"});
  const std::string env_id = RunHarness("claude-code");
  ExpectTheTaskDone(env_id, "/v1/messages", "native");
  const HttpReply stats = Backend(backend, "/admin/stats");
  EXPECT_GE(boost::json::parse(stats.body).at("native_messages").as_int64(), 2) << stats.body;
}

TEST_F(HarnessProxyTest, OpenCodeRunsItsBashToolThroughChatCompletions) {
  const std::string env_id = RunHarness("opencode");
  ExpectTheTaskDone(env_id, "/v1/chat/completions");
  // Its title call is a side call, named so.
  EXPECT_GE(roles_.calls_by_role().auxiliary(), 1u) << roles_.ShortDebugString();
  bool titled = false;
  for (const v1::LlmCall& c : roles_.calls()) titled |= c.role_reason() == "title generator (opencode)";
  EXPECT_TRUE(titled) << roles_.ShortDebugString();
}

TEST_F(HarnessProxyTest, GeminiCliRunsItsShellToolThroughTheGeminiApi) {
  const std::string env_id = RunHarness("gemini-cli");
  ExpectTheTaskDone(env_id, "/v1beta/models/{model}:streamGenerateContent", "translated");
}

// An upstream that serves Google's Gemini API itself: Gemini CLI's calls pass through untranslated, to the path of
// the session's model.
TEST_F(HarnessProxyTest, GeminiCliThroughAnUpstreamThatServesGeminiItselfGoesNative) {
  const std::string backend = StartBackend({"--shell-agent", "--native-gemini"});
  std::ofstream(dir_ + "/proxy.yaml") << "upstreams:\n  - {url: http://" << backend << ", dialects: [gemini]}\n";
  StartProxy({}, {"--config=" + dir_ + "/proxy.yaml"});
  const std::string env_id = RunHarness("gemini-cli");
  ExpectTheTaskDone(env_id, "/v1beta/models/{model}:streamGenerateContent", "native");
  const HttpReply stats = Backend(backend, "/admin/stats");
  EXPECT_GE(boost::json::parse(stats.body).at("native_gemini").as_int64(), 2) << stats.body;
}

TEST_F(HarnessProxyTest, QwenCodeRunsItsShellToolThroughChatCompletions) {
  const std::string env_id = RunHarness("qwen-code");
  ExpectTheTaskDone(env_id, "/v1/chat/completions");
}

TEST_F(HarnessProxyTest, PiRunsItsBashToolThroughChatCompletions) {
  const std::string env_id = RunHarness("pi");
  ExpectTheTaskDone(env_id, "/v1/chat/completions");
}

TEST_F(HarnessProxyTest, ClineRunsItsShellToolThroughChatCompletions) {
  const std::string env_id = RunHarness("cline");
  ExpectTheTaskDone(env_id, "/v1/chat/completions");
}

TEST_F(HarnessProxyTest, AnUninstalledHarnessSaysHowToInstallIt) {
  auto harness = ResolveHarness("codex");
  ASSERT_THAT(harness, IsOk());
  EXPECT_EQ(harness->id(), "codex@0.169.0");  // the pinned version by default
  EXPECT_THAT(ResolveHarness("codex@0.171.0"), IsOk());
  EXPECT_THAT(ResolveHarness("codex@0.1 ; rm -rf /").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("npm version")));
  EXPECT_THAT(ResolveHarness("aider").status(),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::HasSubstr("claude-code, codex, opencode, gemini-cli, qwen-code, pi, cline")));
  // Another version's missing install says how to install that version.
  std::vector<std::string> other = HarnessArgv(*ResolveHarness("codex@0.171.0"));
  EXPECT_THAT(other.back(), ::testing::HasSubstr("/codex@0.171.0/node_modules/.bin"));
  EXPECT_THAT(other.back(), ::testing::HasSubstr("run 'corral harness install codex@0.171.0'"));
  std::vector<std::string> argv = HarnessArgv(*harness);
  argv.insert(argv.begin(), {"/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "CORRAL_HARNESS_ROOT=" + dir_});
  auto run = testing::Subprocess::Start(argv, dir_ + "/missing.log");
  ASSERT_THAT(run, IsOk());
  auto status = run->Wait(absl::Seconds(20));
  ASSERT_THAT(status, IsOk());
  EXPECT_EQ(WEXITSTATUS(*status), 127);
  EXPECT_THAT(run->Log(), ::testing::HasSubstr("the harness codex 0.169.0 is not installed here: run 'corral "
                                               "harness install codex'"));
}

}  // namespace
}  // namespace corral
