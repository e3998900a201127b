// An in-memory sandbox host for other services' unit tests (the scheduler's, the sandbox API's): sandboxes are ids with
// a file map, commands answer what the test scripts, and failures are queued by the test. Calls that "hang" wait on the
// test's FakeClock until their deadline (DEADLINE_EXCEEDED) or their episode's stop (CANCELLED). Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "services/sandbox_host/client/host_api.h"
#include "services/sandbox_host/client/testing/fake_interactive.h"

namespace corral::sandbox {

// Waits on `clock` until `options.deadline` (DEADLINE_EXCEEDED) or until `options.control` is stopped
// (CANCELLED): what a real call does when the other side never answers.
boost::asio::awaitable<absl::Status> Hang(Clock& clock, CallOptions options);

class FakeHost final : public HostApi {
 public:
  using HostApi::DeleteSandbox;
  FakeHost(std::string address, Clock* clock, uint32_t capacity = 8);
  const std::string& address() const override { return address_; }

  // --- what the test scripts
  // The next `n` creates fail with `status` (after them, creates succeed again).
  void FailCreates(absl::Status status, int n = 1);
  void FailPulls(absl::Status status);
  void FailTemplates(absl::Status status);
  // HostInfo answers UNAVAILABLE (the host is gone) while set.
  void SetUnreachable(bool unreachable);
  // What HostInfo reports the host offers (default: everything, Landlock ABI 5).
  void SetFeatures(v1::HostFeatures features);
  // The agent harnesses HostInfo lists as installed (NAME@VERSION; default none).
  void SetHarnesses(std::vector<std::string> harnesses);
  // Exec waits for its deadline or its episode's stop instead of answering.
  void HangExecs(bool hang);
  // Answers an Exec (default: exit 0, no output). May write files with WriteSandboxFile.
  void OnExec(std::function<ExecOutcome(const std::string& sandbox_id, const v1::ExecRequest&)> fn);
  void WriteSandboxFile(const std::string& sandbox_id, const std::string& path, std::string content);
  // What each interactive process does (StartInteractive), chosen by how it was started; default: it answers
  // nothing.
  void OnInteractive(std::function<FakeInteractive::Script(const v1::ExecRequest&)> script_for);
  // The next StartInteractive fails with `status` (NOT_FOUND: no such program, UNAVAILABLE: the host is gone).
  void FailInteractive(absl::Status status);
  // What Get reports of a live sandbox's resource use (default: nothing measured).
  void SetUsage(const std::string& sandbox_id, v1::ResourceUsage usage);

  // --- what the test observes
  std::vector<v1::SandboxSpec> created() const;  // every successful create's spec, in order
  int create_calls() const;
  int fork_calls() const;
  std::set<std::string> live() const;  // sandboxes created and not deleted
  std::vector<std::string> deleted() const;
  std::vector<std::string> templates() const;  // template keys built
  std::vector<std::string> pulls() const;
  std::vector<v1::ExecRequest> execs() const;
  std::optional<std::string> SandboxFile(const std::string& sandbox_id, const std::string& path) const;
  // Every interactive process started, in order (ended ones too).
  std::vector<std::shared_ptr<FakeInteractive>> interactive() const;

  // --- HostApi
  boost::asio::awaitable<absl::StatusOr<v1::HostInfoResponse>> HostInfo(absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<v1::CreatedSandbox>> Create(const v1::SandboxSpec& spec,
                                                                    CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::CreateSandboxesResponse>> Fork(v1::ForkSandboxRequest request,
                                                                           CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> GetSandbox(v1::GetSandboxRequest request,
                                                                 absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> DeleteSandbox(v1::DeleteSandboxRequest request,
                                                                                  absl::Duration timeout) override;
  boost::asio::awaitable<absl::StatusOr<ExecOutcome>> Exec(v1::ExecRequest request, size_t output_limit,
                                                           CallOptions options) override;
  boost::asio::awaitable<absl::Status> WriteFile(const std::string& sandbox_id, const v1::InlineFile& file,
                                                 CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Sandbox>> SetPaused(const std::string& sandbox_id, bool paused,
                                                                CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<uint32_t>> KillAllProcesses(const std::string& sandbox_id,
                                                                    CallOptions options) override;
  boost::asio::awaitable<absl::Status> Remove(const std::string& sandbox_id, const std::string& path, bool recursive,
                                              CallOptions options) override;
  boost::asio::awaitable<absl::Status> MakeDir(const std::string& sandbox_id, const std::string& path,
                                               CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<std::optional<std::string>>> ReadFile(const std::string& sandbox_id,
                                                                              const std::string& path, size_t max_bytes,
                                                                              CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Template>> PrepareTemplate(v1::PrepareTemplateRequest request,
                                                                       CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::Image>> PullImage(const std::string& ref, CallOptions options) override;
  // Each process reports to its observer as a real host's does (pids from 1000 up); tests drive it (FakeInteractive).
  boost::asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> StartInteractive(
      v1::ExecRequest start, ExecObserver observer) override;
  // From the files written (WriteFile): a file's info, or a directory's direct entries.
  boost::asio::awaitable<absl::StatusOr<v1::FileInfo>> Stat(const std::string& sandbox_id, const std::string& path,
                                                            CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<std::vector<v1::FileInfo>>> ListDir(const std::string& sandbox_id,
                                                                            const std::string& path,
                                                                            CallOptions options) override;
  boost::asio::awaitable<absl::StatusOr<v1::ListSandboxesResponse>> ListSandboxes(v1::ListSandboxesRequest request,
                                                                                  absl::Duration timeout) override;

 private:
  absl::Status Known(const std::string& sandbox_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string address_;
  Clock* const clock_;
  const uint32_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<absl::Status> create_failures_ ABSL_GUARDED_BY(mu_);
  absl::Status pull_status_ ABSL_GUARDED_BY(mu_);
  absl::Status template_status_ ABSL_GUARDED_BY(mu_);
  bool unreachable_ ABSL_GUARDED_BY(mu_) = false;
  v1::HostFeatures features_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> harnesses_ ABSL_GUARDED_BY(mu_);
  bool hang_execs_ ABSL_GUARDED_BY(mu_) = false;
  std::function<ExecOutcome(const std::string&, const v1::ExecRequest&)> on_exec_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int create_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::SandboxSpec> created_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Sandbox> live_ ABSL_GUARDED_BY(mu_);
  int fork_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::map<std::string, std::string>> files_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> dirs_ ABSL_GUARDED_BY(mu_);  // made by MakeDir
  std::vector<std::string> deleted_, templates_, pulls_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ExecRequest> execs_ ABSL_GUARDED_BY(mu_);
  std::function<FakeInteractive::Script(const v1::ExecRequest&)> script_for_ ABSL_GUARDED_BY(mu_);
  absl::Status interactive_status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<FakeInteractive>> interactive_ ABSL_GUARDED_BY(mu_);
  int next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
};

}  // namespace corral::sandbox
