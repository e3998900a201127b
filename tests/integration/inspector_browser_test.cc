// The rollout inspector in a real browser: a whole cluster runs a tool_loop batch (scripted model, real sandbox,
// real tool calls), the trainer acknowledges part of it, and headless Chromium (Debian's `chromium`) renders the
// scheduler's pages. The test reads the rendered DOM: the batch in the list, its groups with their rewards, one
// episode's conversation with its tool call and output, and exactly the generated tokens highlighted.
#include <stdio.h>
#include <sys/wait.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

constexpr char kChromium[] = "/usr/bin/chromium";

// The page at `url` as Chromium rendered it once its scripts ran (the inspector marks <body data-ready="1">).
std::string RenderedDom(const std::string& url, const std::string& profile_dir) {
  const std::string command =
      absl::StrCat(kChromium, " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run",
                   " --user-data-dir=", profile_dir, " --virtual-time-budget=10000 --dump-dom '", url, "' 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  EXPECT_THAT(out, HasSubstr("data-ready=\"1\"")) << "the page never finished rendering: " << url;
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST_F(SchedulerFixture, TheInspectorRendersBatchesGroupsAndTrajectoriesInChromium) {
  ASSERT_TRUE(std::filesystem::exists(kChromium)) << "scripts/bootstrap installs chromium for this test";
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 8));
  const std::string http = scheduler_->ready.http;
  ASSERT_FALSE(http.empty()) << "the scheduler reported no inspector address";

  // Two tasks, two rollouts each: the model runs `echo` through the shell tool, then answers.
  std::vector<v1::Task> tasks;
  for (const char* word : {"apples", "pears"}) {
    v1::Task t;
    t.set_id(absl::StrCat("echo-", word));
    t.set_prompt(absl::StrCat("Say ", word, " through the shell."));
    t.set_answer(absl::StrCat("done: ", word));
    t.set_runner(v1::RUNNER_TOOL_LOOP);
    t.mutable_llm()->set_params_json(absl::StrCat(R"({"fake": {"tool_script": ["echo )", word, R"("]}})"));
    v1::ToolSpec* tool = t.mutable_tool_loop()->add_tools();
    tool->set_name("shell");
    tool->set_kind(v1::TOOL_KIND_BASH);
    t.mutable_tool_loop()->set_max_turns(2);
    tasks.push_back(std::move(t));
  }
  v1::BatchSpec spec;
  spec.set_batch_id("inspect-me");
  spec.set_group_size(2);
  ASSERT_THAT(Submit(spec, tasks), IsOk());
  auto results = Results("inspect-me");
  ASSERT_THAT(results, IsOk());
  ASSERT_EQ(results->size(), 4u);
  const v1::EpisodeResult* shown = nullptr;
  for (const auto& r : *results) {
    ASSERT_EQ(r.status(), v1::EPISODE_STATUS_FINISHED) << r.failure_message();
    if (r.ids().episode_id() == "inspect-me:g1:e0") shown = &r;
  }
  ASSERT_NE(shown, nullptr);
  ASSERT_GE(shown->trajectory().branches_size(), 1);
  size_t generated = 0;
  for (bool g : shown->trajectory().branches(0).token_generated()) generated += g ? 1 : 0;
  ASSERT_GT(generated, 0u) << "the scripted model returns token ids";
  // The trainer acknowledges the episode: the inspector then reads it from the journal.
  ASSERT_THAT(Ack({shown->ids().episode_id()}), IsOk());

  const std::string profile = dir_ + "/chromium";
  // Without the cluster token the API refuses, on loopback too, and the page asks for the token.
  auto refused = http::HttpGet(http, "/api/batches");
  EXPECT_FALSE(refused.ok());
  std::string dom = RenderedDom(absl::StrCat("http://", http, "/"), profile);
  EXPECT_THAT(dom, ::testing::Not(HasSubstr("inspect-me")));
  EXPECT_THAT(dom, HasSubstr("token"));
  // The link `corral ui` prints carries it.
  const std::string base = absl::StrCat("http://", http, "/?token=", token_);

  dom = RenderedDom(base, profile);
  EXPECT_THAT(dom, HasSubstr("id=\"batches\""));
  EXPECT_THAT(dom, HasSubstr("href=\"#/batch/inspect-me\""));
  EXPECT_THAT(dom, HasSubstr(">COMPLETE<"));

  dom = RenderedDom(base + "#/batch/inspect-me", profile);
  EXPECT_THAT(dom, HasSubstr("id=\"groups\""));
  EXPECT_EQ(Count(dom, "class=\"group\""), 2u);
  EXPECT_EQ(Count(dom, "class=\"rollout\""), 4u);
  EXPECT_THAT(dom, HasSubstr("href=\"#/episode/inspect-me:g1:e0\""));
  EXPECT_THAT(dom, HasSubstr("Say pears through the shell."));
  EXPECT_THAT(dom, HasSubstr("id=\"usage\""));  // what the batch cost
  EXPECT_THAT(dom, HasSubstr("CPU-hours"));
  EXPECT_THAT(dom, HasSubstr("prompt tokens"));

  dom = RenderedDom(base + "#/episode/inspect-me:g1:e0", profile);
  EXPECT_THAT(dom, HasSubstr("id=\"conversation\""));
  EXPECT_THAT(dom, HasSubstr("data-role=\"user\""));
  EXPECT_THAT(dom, HasSubstr("data-role=\"assistant\""));
  EXPECT_THAT(dom, HasSubstr("data-role=\"tool\""));
  EXPECT_THAT(dom, HasSubstr("class=\"toolcall\""));  // the model's call of the shell tool
  EXPECT_THAT(dom, HasSubstr("done: pears"));         // its final answer
  EXPECT_THAT(dom, HasSubstr("acknowledged by the trainer"));
  EXPECT_THAT(dom, HasSubstr("id=\"timeline\""));
  // What it cost: two model calls, the shell tool once.
  EXPECT_THAT(dom, HasSubstr("id=\"episode-usage\""));
  EXPECT_THAT(dom, HasSubstr("2 call(s), "));
  EXPECT_THAT(dom, HasSubstr("shell ×1"));
  // Each call's role: the agent's conversation, the tool loop's two calls.
  EXPECT_THAT(dom, HasSubstr("role: agent"));
  EXPECT_THAT(dom, HasSubstr("generated · agent"));
  EXPECT_THAT(dom, HasSubstr(">2 agent<"));
  EXPECT_EQ(Count(dom, "class=\"tok gen\""), generated);
  EXPECT_EQ(Count(dom, "class=\"tok\""),
            static_cast<size_t>(shown->trajectory().branches(0).token_ids_size()) - generated);

  dom = RenderedDom(base + "#/episode/inspect-me:g9:e9", profile);
  EXPECT_THAT(dom, HasSubstr("id=\"error\""));
  EXPECT_THAT(dom, HasSubstr("unknown episode"));
}

}  // namespace
}  // namespace corral
