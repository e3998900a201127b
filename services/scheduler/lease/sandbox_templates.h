// Sandbox templates (Scheduler.RequestTemplateBuild and the calls around it): environments a front names, builds
// once and leases by name (the E2B API's templates). A build places its environment through SandboxLeases, so the
// host that takes it pulls the image and runs the setup (kept there as a template, by content), then releases
// it; any other host builds the same environment again when a lease of it lands there. Templates and the files
// their builds read are journaled before they are answered; a build still running when the scheduler stopped is
// FAILED at the restart. File contents stay in the journal (only their index is in memory). Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "corral/v1/scheduler.pb.h"
#include "libs/core/clock.h"
#include "services/scheduler/lease/sandbox_leases.h"

namespace corral::scheduler {

// Where templates and their files are kept across restarts (the scheduler's journal).
class TemplateLog {
 public:
  virtual ~TemplateLog() = default;
  virtual void SaveTemplate(const v1::SandboxTemplate& t, std::function<void(absl::Status)> done) = 0;
  virtual void DropTemplate(const std::string& template_id) = 0;
  // `file` with its content; `done` once it is durable.
  virtual void SaveTemplateFile(const v1::TemplateFile& file, absl::Time time,
                                std::function<void(absl::Status)> done) = 0;
  virtual void DropTemplateFile(const std::string& owner, const std::string& hash) = 0;
  virtual absl::StatusOr<std::string> LoadTemplateFile(const std::string& owner, const std::string& hash) = 0;
};

// A journaled file without its content, for Restore.
struct TemplateFileEntry {
  std::string owner;
  std::string hash;
  uint64_t size = 0;
  absl::Time time;
};

struct TemplateLimits {
  size_t max_templates = 1000;                   // per owner
  size_t max_builds = 8;                         // kept per template, oldest dropped first
  size_t max_files = 256;                        // per owner, oldest dropped first
  size_t max_file_bytes = 3 << 20;               // a gRPC message holds it, and an environment's setup files
  absl::Duration build_ttl = absl::Minutes(10);  // the build's lease, should the release not come
};

// The owner builds run their leases as (no front lists them).
inline constexpr char kTemplateBuildOwner[] = "corral:template-build";

class SandboxTemplates {
 public:
  // `log` may be null (nothing survives a restart; files are then not kept at all).
  SandboxTemplates(SandboxLeases* leases, boost::asio::any_io_executor executor, Clock* clock, TemplateLog* log,
                   TemplateLimits limits = {});

  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> Request(v1::RequestTemplateBuildRequest request);
  // Validates, marks the build BUILDING, journals it and starts it; answers before it ends.
  boost::asio::awaitable<absl::StatusOr<v1::SandboxTemplate>> Start(v1::StartTemplateBuildRequest request);
  absl::StatusOr<v1::SandboxTemplate> Get(const v1::GetTemplateRequest& request) const;
  absl::Status Delete(const v1::GetTemplateRequest& request);
  boost::asio::awaitable<absl::StatusOr<v1::TemplateFile>> PutFile(v1::TemplateFile file);
  absl::StatusOr<v1::TemplateFile> GetFile(const v1::GetTemplateFileRequest& request) const;

  // At start, what a previous run journaled; builds it left unfinished end FAILED.
  void Restore(std::vector<v1::SandboxTemplate> templates, std::vector<TemplateFileEntry> files);
  size_t size() const;

 private:
  struct FileIndex {
    uint64_t size = 0;
    absl::Time time;
  };
  // The template named by id or name, when `owner` has it.
  const v1::SandboxTemplate* Find(const v1::GetTemplateRequest& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::TemplateBuild* FindBuild(const std::string& template_id, const std::string& build_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Journals the template as it is now and waits until it is durable.
  boost::asio::awaitable<absl::Status> Save(v1::SandboxTemplate t);
  // Places the build's environment, releases the lease, records the outcome.
  boost::asio::awaitable<void> Build(std::string template_id, std::string build_id, v1::EnvironmentSpec env);
  void Log(v1::TemplateBuild* build, const std::string& level, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SandboxLeases* const leases_;
  const boost::asio::any_io_executor executor_;
  Clock* const clock_;
  TemplateLog* const log_;
  const TemplateLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, v1::SandboxTemplate> templates_ ABSL_GUARDED_BY(mu_);              // by id
  std::map<std::pair<std::string, std::string>, std::string> names_ ABSL_GUARDED_BY(mu_);  // (owner, name) -> id
  std::map<std::pair<std::string, std::string>, FileIndex> files_ ABSL_GUARDED_BY(mu_);    // (owner, hash)
};

}  // namespace corral::scheduler
