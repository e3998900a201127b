// What an episode asks of a sandbox host, built from its task alone (no I/O): the sandbox spec, the features a
// host must offer, the working directory of its commands, and the template a host builds once per key.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "corral/v1/sandbox.pb.h"
#include "corral/v1/scheduler.pb.h"
#include "services/scheduler/remote/placement.h"

namespace corral::scheduler {

struct SandboxRequest {
  v1::SandboxSpec spec;
  Requirements needs;
  std::string workdir;  // "/workspace" (the task's, or when it is among the task paths), else "" (the home)
};

// The network policy defaults to PROXY_ONLY for agents (reaching `proxy_port` only) and NONE for the others.
// Without task paths, /workspace and /logs. Labelled with the scheduler and the episode (the host's sweep).
SandboxRequest SandboxRequestFor(const v1::Task& task, const v1::EpisodeIds& ids, uint16_t proxy_port,
                                 const std::string& scheduler_id);

// The template of `spec` (its setup files and commands, run with the setup network policy, OPEN by default).
v1::PrepareTemplateRequest TemplateRequestFor(const v1::EnvironmentSpec& env, const v1::SandboxSpec& spec,
                                              absl::Duration setup_timeout);

}  // namespace corral::scheduler
