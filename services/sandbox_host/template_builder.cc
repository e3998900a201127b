#include "services/sandbox_host/template_builder.h"

#include <fcntl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/api/ids.h"
#include "libs/api/proto_digest.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/images/layer_unpack.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/sandbox_ops.h"

namespace corral::sandbox {
namespace {

constexpr size_t kOutputTail = 1024;
constexpr int kMaxSetupCommands = 64;

v1::SandboxSpec BuildSpec(const v1::PrepareTemplateRequest& r) {
  v1::SandboxSpec spec;
  spec.set_network_policy(r.network_policy());
  *spec.mutable_allowed_ports() = r.allowed_ports();
  *spec.mutable_limits() = r.limits();
  *spec.mutable_env() = r.env();
  *spec.mutable_task_paths() = r.task_paths();
  spec.set_image(r.image());
  (*spec.mutable_labels())["corral.template"] = r.key();
  return spec;
}

absl::Duration SetupTimeout(const v1::PrepareTemplateRequest& r, const HostOptions& host) {
  return r.has_setup_timeout() ? FromProto(r.setup_timeout()) : host.default_setup_timeout;
}

// Runs one setup command to its end (killing it once `cancelled`); returns its exit and the last KiB of output.
std::pair<ExitInfo, std::string> RunToExit(const std::shared_ptr<Execution>& execution,
                                           const std::atomic<bool>& cancelled) {
  struct Wait {
    absl::Mutex mu;
    std::optional<ExitInfo> exit ABSL_GUARDED_BY(mu);
    std::string tail ABSL_GUARDED_BY(mu);
  };
  auto wait = std::make_shared<Wait>();
  std::weak_ptr<Execution> weak = execution;
  execution->SetListener([weak, wait] {
    auto e = weak.lock();
    if (e == nullptr) return;
    absl::MutexLock lock(&wait->mu);
    while (std::optional<OutputEvent> ev = e->Next()) {
      if (ev->kind == OutputEvent::kExit) {
        wait->exit = ev->exit;
        continue;
      }
      wait->tail += ev->data;
      if (wait->tail.size() > kOutputTail) wait->tail.erase(0, wait->tail.size() - kOutputTail);
    }
  });
  absl::MutexLock lock(&wait->mu);
  const absl::Condition exited(
      +[](std::optional<ExitInfo>* x) { return x->has_value(); }, &wait->exit);
  while (!wait->mu.AwaitWithTimeout(exited, absl::Milliseconds(100))) {
    if (cancelled) {
      wait->mu.Unlock();
      execution->Kill(ExitReason::kKilled);
      wait->mu.Lock();
    }
  }
  execution->SetListener(nullptr);
  return {*wait->exit, wait->tail};
}

}  // namespace

absl::Status ValidateTemplateRequest(const v1::PrepareTemplateRequest& r, const HostOptions& host) {
  CORRAL_RETURN_IF_ERROR(ValidateId("key", r.key()));
  CORRAL_ASSIGN_OR_RETURN(SandboxSpec spec, FromProto(BuildSpec(r)));
  for (const v1::InlineFile& f : r.files()) {
    auto path = spec.image.empty() ? ParseSandboxPath(f.path(), spec.task_paths) : ParseImagePath(f.path(), {});
    if (!path.ok()) return absl::InvalidArgumentError(absl::StrCat("files: ", path.status().message()));
    if (f.permissions() > 0777) return absl::InvalidArgumentError("files: permissions must be at most 0777");
  }
  if (r.setup_commands_size() > kMaxSetupCommands) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxSetupCommands, " setup_commands"));
  }
  for (int i = 0; i < r.setup_commands_size(); ++i) {
    if (r.setup_commands(i).argv_size() == 0 || r.setup_commands(i).argv(0).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("setup_commands[", i, "].argv must not be empty"));
    }
  }
  const absl::Duration timeout = SetupTimeout(r, host);
  if (timeout <= absl::ZeroDuration() || timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError("setup_timeout must be above 0 and at most 24h");
  }
  return absl::OkStatus();
}

std::string TemplateDigest(const v1::PrepareTemplateRequest& request) {
  v1::PrepareTemplateRequest content = request;
  content.clear_key();
  content.clear_setup_timeout();  // how long a build may take is not what it builds
  return absl::StrCat("sha256-", Sha256Hex(DeterministicBytes(content)));  // map fields in key order
}

absl::StatusOr<CopyStats> BuildTemplate(SandboxManager& sandboxes, ExecManager& execs, Clock& clock,
                                        const v1::PrepareTemplateRequest& request, const std::string& out_dir,
                                        const std::atomic<bool>& cancelled) {
  const absl::Time deadline = clock.Now() + SetupTimeout(request, sandboxes.options());
  CORRAL_ASSIGN_OR_RETURN(SandboxSpec spec, FromProto(BuildSpec(request)));
  spec.upper_on_disk = true;  // on an image, what the setup writes is kept as a layer
  CORRAL_ASSIGN_OR_RETURN(SandboxManager::CreateResult created, sandboxes.Create(1, spec));
  if (created.created.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no sandbox slot is free to build the template in (", created.rejected_reason, ")"));
  }
  std::shared_ptr<const Sandbox> sb = created.created[0].sandbox;
  struct Cleanup {
    SandboxManager& sandboxes;
    std::string id;
    ~Cleanup() { sandboxes.Delete(id); }
  } cleanup{sandboxes, sb->id};

  const Owner owner = sb->FileOwner();
  for (const v1::InlineFile& f : request.files()) {
    CORRAL_ASSIGN_OR_RETURN(SandboxPath path, sb->ParsePath(f.path()));
    const mode_t mode = f.permissions() == 0 ? 0644 : static_cast<mode_t>(f.permissions());
    CORRAL_ASSIGN_OR_RETURN(FileWriter writer, FileWriter::Open(sb->home_fd.get(), path, WriteMode::kReplace, mode,
                                                                owner, /*make_parents=*/true));
    CORRAL_RETURN_IF_ERROR(writer.Write(f.content()));
    CORRAL_RETURN_IF_ERROR(writer.Commit());
  }
  for (int i = 0; i < request.setup_commands_size(); ++i) {
    if (cancelled) return absl::CancelledError("the host is shutting down");
    const v1::Command& command = request.setup_commands(i);
    const std::string name = absl::StrCat("setup_commands[", i, "] (", absl::StrJoin(command.argv(), " "), ")");
    CORRAL_ASSIGN_OR_RETURN(ExecOptions options, ExecOptionsFrom(*sb, command, sandboxes.options()));
    const absl::Duration left = deadline - clock.Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("the template's setup_timeout passed");
    const bool cut_by_deadline = options.timeout > left;
    options.timeout = std::min(options.timeout, left);
    CORRAL_ASSIGN_OR_RETURN(std::shared_ptr<Execution> execution, execs.Start(sb, std::move(options)));
    auto [exit, tail] = RunToExit(execution, cancelled);
    if (cancelled) return absl::CancelledError("the host is shutting down");
    if (exit.reason == ExitReason::kTimedOut && cut_by_deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the template's setup_timeout passed during ", name));
    }
    if (exit.exit_code != 0) {
      return absl::FailedPreconditionError(absl::StrCat(name, " exited with code ", exit.exit_code,
                                                        exit.timed_out ? " (timed out)" : "", "; output ends: ", tail));
    }
  }
  if (sb->in_image()) {  // what the setup changed, kept as a layer above the image's
    CORRAL_RETURN_IF_ERROR(sandboxes.DeleteKeepingUpper(sb->id, out_dir));
    CORRAL_ASSIGN_OR_RETURN(LayerStats layer,
                            AdoptUpperAsLayer(out_dir, sb->uid, sb->uid, sb->image->inside_uid, sb->image->inside_gid));
    return CopyStats{.bytes = layer.bytes, .files = layer.entries};
  }
  UniqueFd out(open(out_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!out.valid()) return absl::InternalError(absl::StrCat("cannot open ", out_dir));
  return CopyTree(sb->home_fd.get(), out.get(), 0, 0, {".tmp"});
}

}  // namespace corral::sandbox
