#include "services/scheduler/episode/sandbox_request.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "services/scheduler/table/submission.h"

namespace corral::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::EpisodeIds Ids() {
  v1::EpisodeIds ids;
  ids.set_episode_id("b:g0:e0");
  return ids;
}

TEST(SandboxRequestTest, AnAgentReachesOnlyTheProxyByDefault) {
  v1::Task task;
  task.set_runner(v1::RUNNER_AGENT);
  const SandboxRequest r = SandboxRequestFor(task, Ids(), 4000, "sched-1");
  EXPECT_EQ(r.spec.network_policy(), v1::NETWORK_POLICY_PROXY_ONLY);
  EXPECT_THAT(r.spec.allowed_ports(), ElementsAre(4000));
  EXPECT_TRUE(r.needs.landlock_net);
  EXPECT_FALSE(r.needs.network_namespace);
  EXPECT_THAT(r.spec.task_paths(), ElementsAre("/workspace", "/logs"));
  EXPECT_EQ(r.workdir, "/workspace");
  EXPECT_EQ(r.spec.labels().at(kSchedulerLabel), "sched-1");
  EXPECT_EQ(r.spec.labels().at(kEpisodeLabel), "b:g0:e0");
}

TEST(SandboxRequestTest, OtherRunnersHaveNoNetworkAndNeedANamespaceForIt) {
  v1::Task task;
  task.set_runner(v1::RUNNER_TOOL_LOOP);
  const SandboxRequest r = SandboxRequestFor(task, Ids(), 4000, "s");
  EXPECT_EQ(r.spec.network_policy(), v1::NETWORK_POLICY_NONE);
  EXPECT_THAT(r.spec.allowed_ports(), IsEmpty());
  EXPECT_TRUE(r.needs.network_namespace);
}

TEST(SandboxRequestTest, TheTasksEnvironmentIsCarriedOver) {
  v1::Task task;
  task.set_runner(v1::RUNNER_AGENT);
  v1::EnvironmentSpec& env = *task.mutable_environment();
  env.set_network_policy(v1::NETWORK_POLICY_OPEN);
  env.set_image("registry.local/py:3");
  env.add_task_paths("/data");
  env.set_require_private_filesystem_view(true);
  (*env.mutable_env())["K"] = "v";
  env.mutable_limits()->set_memory_bytes(1 << 30);
  env.add_setup_commands()->add_argv("make");
  const SandboxRequest r = SandboxRequestFor(task, Ids(), 4000, "s");
  EXPECT_EQ(r.spec.network_policy(), v1::NETWORK_POLICY_OPEN);
  EXPECT_THAT(r.spec.allowed_ports(), IsEmpty());
  EXPECT_EQ(r.spec.image(), "registry.local/py:3");
  EXPECT_EQ(r.needs.image, "registry.local/py:3");
  EXPECT_TRUE(r.needs.private_view);
  EXPECT_THAT(r.spec.task_paths(), ElementsAre("/data"));
  EXPECT_EQ(r.workdir, "");  // no /workspace among the task paths: the home
  EXPECT_EQ(r.spec.env().at("K"), "v");
  EXPECT_EQ(r.spec.limits().memory_bytes(), 1u << 30);
  EXPECT_EQ(r.spec.template_key(), TemplateKey(env));
  EXPECT_FALSE(r.spec.template_key().empty());
}

TEST(SandboxRequestTest, TheTemplateRunsSetupWithAnOpenNetworkUnlessTheTaskSaysOtherwise) {
  v1::Task task;
  v1::EnvironmentSpec& env = *task.mutable_environment();
  env.add_setup_commands()->add_argv("pip");
  const SandboxRequest r = SandboxRequestFor(task, Ids(), 4000, "s");
  v1::PrepareTemplateRequest t = TemplateRequestFor(env, r.spec, absl::Minutes(3));
  EXPECT_EQ(t.key(), r.spec.template_key());
  EXPECT_EQ(t.network_policy(), v1::NETWORK_POLICY_OPEN);
  EXPECT_EQ(t.setup_commands(0).argv(0), "pip");
  EXPECT_THAT(t.task_paths(), ElementsAre("/workspace", "/logs"));
  EXPECT_EQ(FromProto(t.setup_timeout()), absl::Minutes(3));
  env.set_setup_network_policy(v1::NETWORK_POLICY_NONE);
  EXPECT_EQ(TemplateRequestFor(env, r.spec, absl::Minutes(3)).network_policy(), v1::NETWORK_POLICY_NONE);
}

}  // namespace
}  // namespace corral::scheduler
