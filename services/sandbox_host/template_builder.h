// The build step of PrepareTemplate: a sandbox of its own (a template uid, the request's network, limits, env
// and task paths), the request's files written into its home, its setup commands run in order, and the home
// copied out into the template's directory. The build sandbox is deleted whatever happens.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "corral/v1/sandbox.pb.h"
#include "libs/core/clock.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/linux/tree_copy.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

// INVALID_ARGUMENT for a bad key, file paths, commands or spec fields (checked before anything is built).
absl::Status ValidateTemplateRequest(const v1::PrepareTemplateRequest& request, const HostOptions& host);

// The host's digest of what the request asks for (files, commands, environment, spec), key excluded.
std::string TemplateDigest(const v1::PrepareTemplateRequest& request);

// FAILED_PRECONDITION naming the setup command that exited non-zero, its exit code and the last KiB of its
// output; DEADLINE_EXCEEDED past the setup timeout; RESOURCE_EXHAUSTED when no sandbox slot is free; CANCELLED
// soon after `cancelled` turns true (a running setup command is killed).
absl::StatusOr<CopyStats> BuildTemplate(SandboxManager& sandboxes, ExecManager& execs, Clock& clock,
                                        const v1::PrepareTemplateRequest& request, const std::string& out_dir,
                                        const std::atomic<bool>& cancelled);

}  // namespace corral::sandbox
