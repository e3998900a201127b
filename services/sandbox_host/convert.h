// proto ↔ core conversions for the sandbox host's gRPC adapter and CLI.
#pragma once

#include <sys/stat.h>

#include <cstddef>

#include "corral/v1/sandbox.pb.h"
#include "libs/api/proto_time.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/images/image_store.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

// The largest data chunk a file or image upload stream may carry, and the most a download sends at once.
inline constexpr size_t kMaxDataChunk = 1 << 20;

using ::corral::FromProto;
using ::corral::ToProto;

// INVALID_ARGUMENT for values that cannot be represented (ports above 65535, negative durations).
absl::StatusOr<SandboxSpec> FromProto(const v1::SandboxSpec& spec);
void ToProto(const Sandbox& sandbox, size_t running_processes, v1::Sandbox* out);
// Its resource use now and what it has cost so far (GetSandbox, DeleteSandbox).
void ToProto(const SandboxUsage& usage, v1::ResourceUsage* out);
void ToProto(const SandboxSpec& spec, v1::SandboxSpec* out);
void ToProto(const CgroupLimits& cgroup, const Rlimits& rlimits, int64_t disk_bytes, v1::ResourceLimits* out);
void ToProto(const ExitInfo& exit, v1::ExitStatus* out);
void ToProto(const ProcessInfo& process, v1::Process* out);
void ToProto(const TemplateInfo& info, v1::Template* out);
void ToProto(const Image& image, v1::Image* out);
void ToProto(const struct stat& st, const std::string& path, const std::string& name, const std::string& link_target,
             v1::FileInfo* out);
v1::NetworkPolicy ToProto(NetworkPolicy policy);

}  // namespace corral::sandbox
