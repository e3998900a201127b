// The sandbox host's operations on one sandbox, between the gRPC adapter (and its reactors) and the managers:
// who may act on a sandbox (the host token, or that sandbox's capability token), which sandbox and which path in
// it a request names, and what the file and process calls do there — so the adapter and the reactors only
// translate protos and statuses.
#pragma once

#include <sys/stat.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "corral/v1/sandbox.pb.h"
#include "grpcpp/server_context.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/exec/exec_manager.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

// Checks a call's credentials for one sandbox: the host token, or that sandbox's own capability token.
absl::Status AuthorizeSandbox(const CallAuthenticator& auth, const SandboxManager& manager,
                              const grpc::ServerContextBase& ctx, const std::string& sandbox_id);

// A path in a live sandbox, as a call names it.
struct SandboxFile {
  std::shared_ptr<const Sandbox> sandbox;
  SandboxPath path;
};

// Authorized and found: the sandbox a call may act on (UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND).
absl::StatusOr<std::shared_ptr<const Sandbox>> OpenSandbox(const CallAuthenticator& auth, SandboxManager& manager,
                                                           const grpc::ServerContextBase& ctx,
                                                           const std::string& sandbox_id);
// ... and the path in it (INVALID_ARGUMENT for a path outside the home and task paths). `allow_home`: the home
// itself may be named (listing, stat, remove of its files).
absl::StatusOr<SandboxFile> OpenSandboxPath(const CallAuthenticator& auth, SandboxManager& manager,
                                            const grpc::ServerContextBase& ctx, const std::string& sandbox_id,
                                            const std::string& path, bool allow_home = false);

// A file's metadata and, for a symlink, its target (never followed).
struct FileStat {
  struct stat st {};
  std::string link_target;
};
absl::StatusOr<FileStat> StatFile(const SandboxFile& file);

struct DirPage {
  struct Entry {
    std::string path, name;  // the path as the sandbox names it, and the entry's name
    FileStat stat;
  };
  std::vector<Entry> entries;  // by name, after `page_token`
  std::string next_page_token;
};
// One page of a directory, opened through the path walker (a final symlink is refused, never followed).
absl::StatusOr<DirPage> ListDirectory(const SandboxFile& dir, const std::string& page_token, size_t page_size);

// The home, /tmp and task path roots are the sandbox's structure, not its files: INVALID_ARGUMENT for those.
absl::Status RemoveFile(const SandboxFile& file, bool recursive);

// The options of a command for `sandbox`: argv, env, a cwd resolved through the path walker, a timeout
// (unset: the host's default; above 0 and at most its maximum). INVALID_ARGUMENT / NOT_FOUND /
// FAILED_PRECONDITION as the Exec contract says.
absl::StatusOr<ExecOptions> ExecOptionsFrom(const Sandbox& sandbox, const v1::Command& command,
                                            const HostOptions& host);

// Authorizes the call for `sandbox_id`, finds the sandbox and starts the command in it.
absl::StatusOr<std::shared_ptr<Execution>> StartCommand(SandboxManager& sandboxes, ExecManager& execs,
                                                        const CallAuthenticator& auth,
                                                        const grpc::ServerContextBase& ctx,
                                                        const std::string& sandbox_id, const v1::Command& command,
                                                        ExecOptions extra);

// Appends a background process's output to its output file (or drops it), on the exec manager's threads. The
// file stops growing at `max_bytes`, as the process's own writes would.
void SinkOutput(const std::shared_ptr<Execution>& execution, std::optional<FileWriter> file, int64_t max_bytes);

// A fork's carried processes (CreateResult.created[].carried) watched in their children: a background one's
// output appended to its output path there. Each child's processes, in order.
std::vector<std::vector<ProcessInfo>> AdoptCarried(ExecManager& execs, SandboxManager::CreateResult& result);

}  // namespace corral::sandbox
