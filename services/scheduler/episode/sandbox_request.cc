#include "services/scheduler/episode/sandbox_request.h"

#include "libs/api/proto_time.h"
#include "libs/harness/harnesses.h"
#include "services/scheduler/table/submission.h"

namespace corral::scheduler {

SandboxRequest SandboxRequestFor(const v1::Task& task, const v1::EpisodeIds& ids, uint16_t proxy_port,
                                 const std::string& scheduler_id) {
  const v1::EnvironmentSpec& env = task.environment();
  SandboxRequest r;
  v1::SandboxSpec& spec = r.spec;
  spec.set_template_key(TemplateKey(env));
  const v1::NetworkPolicy network = NetworkOf(task);
  spec.set_network_policy(network);
  if (network == v1::NETWORK_POLICY_PROXY_ONLY) spec.add_allowed_ports(proxy_port);
  *spec.mutable_limits() = env.limits();
  *spec.mutable_env() = env.env();
  if (env.task_paths().empty()) {
    spec.add_task_paths("/workspace");
    spec.add_task_paths("/logs");
  } else {
    *spec.mutable_task_paths() = env.task_paths();
  }
  spec.set_require_private_filesystem_view(env.require_private_filesystem_view());
  spec.set_image(env.image());
  (*spec.mutable_labels())[kSchedulerLabel] = scheduler_id;
  (*spec.mutable_labels())[kEpisodeLabel] = ids.episode_id();
  r.needs.private_view = env.require_private_filesystem_view();
  r.needs.network_namespace = network == v1::NETWORK_POLICY_NONE;
  r.needs.landlock_net = network == v1::NETWORK_POLICY_PROXY_ONLY;
  r.needs.image = env.image();
  r.needs.forks = task.has_branch();
  // A harness comes from the host's install, or from the image's PATH (which placement cannot see).
  if (task.runner() == v1::RUNNER_AGENT && !task.agent().harness().empty() && env.image().empty()) {
    if (auto harness = ResolveHarness(task.agent().harness()); harness.ok()) r.needs.harness = harness->id();
  }
  r.workdir = env.workdir();
  if (r.workdir.empty()) {
    for (const auto& p : spec.task_paths()) {
      if (p == "/workspace") r.workdir = "/workspace";
    }
  }
  return r;
}

v1::PrepareTemplateRequest TemplateRequestFor(const v1::EnvironmentSpec& env, const v1::SandboxSpec& spec,
                                              absl::Duration setup_timeout) {
  v1::PrepareTemplateRequest prepare;
  prepare.set_key(spec.template_key());
  *prepare.mutable_files() = env.setup_files();
  *prepare.mutable_setup_commands() = env.setup_commands();
  prepare.set_network_policy(env.setup_network_policy() == v1::NETWORK_POLICY_UNSPECIFIED ? v1::NETWORK_POLICY_OPEN
                                                                                          : env.setup_network_policy());
  *prepare.mutable_limits() = env.limits();
  *prepare.mutable_env() = env.env();
  *prepare.mutable_task_paths() = spec.task_paths();
  prepare.set_image(env.image());
  ToProto(setup_timeout, prepare.mutable_setup_timeout());
  return prepare;
}

}  // namespace corral::scheduler
