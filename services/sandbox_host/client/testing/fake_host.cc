#include "services/sandbox_host/client/testing/fake_host.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/as_tuple.hpp"
#include "boost/asio/experimental/awaitable_operators.hpp"
#include "boost/asio/experimental/concurrent_channel.hpp"
#include "boost/asio/this_coro.hpp"
#include "boost/asio/use_awaitable.hpp"
#include "libs/api/proto_time.h"
#include "libs/async/sleep.h"

namespace corral::sandbox {

namespace asio = boost::asio;

asio::awaitable<absl::Status> Hang(Clock& clock, CallOptions options) {
  using namespace asio::experimental::awaitable_operators;  // NOLINT: || on awaitables
  using StopChannel = asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  auto stopped = std::make_shared<StopChannel>(co_await asio::this_coro::executor, 1);
  async::ScopedInterrupt interrupt(options.control, [stopped] { stopped->try_send(boost::system::error_code()); });
  auto raced = co_await (async::SleepUntil(clock, options.deadline) ||
                         stopped->async_receive(asio::as_tuple(asio::use_awaitable)));
  if (raced.index() == 1) co_return absl::CancelledError("the call was cancelled");
  co_return absl::DeadlineExceededError("deadline exceeded");
}

FakeHost::FakeHost(std::string address, Clock* clock, uint32_t capacity)
    : address_(std::move(address)), clock_(clock), capacity_(capacity) {
  features_.set_mount_namespaces(true);
  features_.set_network_namespaces(true);
  features_.set_landlock_abi(5);
  features_.set_images(true);
  features_.set_forks(true);
}

void FakeHost::FailCreates(absl::Status status, int n) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < n; ++i) create_failures_.push_back(status);
}
void FakeHost::FailPulls(absl::Status status) {
  absl::MutexLock lock(&mu_);
  pull_status_ = std::move(status);
}
void FakeHost::FailTemplates(absl::Status status) {
  absl::MutexLock lock(&mu_);
  template_status_ = std::move(status);
}
void FakeHost::SetUnreachable(bool unreachable) {
  absl::MutexLock lock(&mu_);
  unreachable_ = unreachable;
}
void FakeHost::SetFeatures(v1::HostFeatures features) {
  absl::MutexLock lock(&mu_);
  features_ = std::move(features);
}
void FakeHost::SetHarnesses(std::vector<std::string> harnesses) {
  absl::MutexLock lock(&mu_);
  harnesses_ = std::move(harnesses);
}
void FakeHost::HangExecs(bool hang) {
  absl::MutexLock lock(&mu_);
  hang_execs_ = hang;
}
void FakeHost::OnExec(std::function<ExecOutcome(const std::string&, const v1::ExecRequest&)> fn) {
  absl::MutexLock lock(&mu_);
  on_exec_ = std::move(fn);
}
void FakeHost::WriteSandboxFile(const std::string& sandbox_id, const std::string& path, std::string content) {
  absl::MutexLock lock(&mu_);
  files_[sandbox_id][path] = std::move(content);
}

std::vector<v1::SandboxSpec> FakeHost::created() const {
  absl::MutexLock lock(&mu_);
  return created_;
}
int FakeHost::create_calls() const {
  absl::MutexLock lock(&mu_);
  return create_calls_;
}
int FakeHost::fork_calls() const {
  absl::MutexLock lock(&mu_);
  return fork_calls_;
}
std::set<std::string> FakeHost::live() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [id, sb] : live_) out.insert(id);
  return out;
}
std::vector<std::string> FakeHost::deleted() const {
  absl::MutexLock lock(&mu_);
  return deleted_;
}
std::vector<std::string> FakeHost::templates() const {
  absl::MutexLock lock(&mu_);
  return templates_;
}
std::vector<std::string> FakeHost::pulls() const {
  absl::MutexLock lock(&mu_);
  return pulls_;
}
std::vector<v1::ExecRequest> FakeHost::execs() const {
  absl::MutexLock lock(&mu_);
  return execs_;
}
std::optional<std::string> FakeHost::SandboxFile(const std::string& sandbox_id, const std::string& path) const {
  absl::MutexLock lock(&mu_);
  auto sb = files_.find(sandbox_id);
  if (sb == files_.end()) return std::nullopt;
  auto f = sb->second.find(path);
  if (f == sb->second.end()) return std::nullopt;
  return f->second;
}

absl::Status FakeHost::Known(const std::string& sandbox_id) const {
  if (!live_.count(sandbox_id)) return absl::NotFoundError(absl::StrCat("sandbox '", sandbox_id, "' not found"));
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<v1::HostInfoResponse>> FakeHost::HostInfo(absl::Duration) {
  absl::MutexLock lock(&mu_);
  if (unreachable_) co_return absl::UnavailableError(absl::StrCat(address_, " does not answer"));
  v1::HostInfoResponse info;
  info.set_host_id(absl::StrCat("id-", address_));
  info.set_capacity(capacity_);
  info.set_live(static_cast<uint32_t>(live_.size()));
  *info.mutable_features() = features_;
  for (const std::string& h : harnesses_) info.add_harnesses(h);
  co_return info;
}

asio::awaitable<absl::StatusOr<v1::CreatedSandbox>> FakeHost::Create(const v1::SandboxSpec& spec, CallOptions) {
  absl::MutexLock lock(&mu_);
  ++create_calls_;
  if (!create_failures_.empty()) {
    absl::Status s = create_failures_.front();
    create_failures_.pop_front();
    co_return s;
  }
  if (live_.size() >= capacity_) co_return absl::ResourceExhaustedError("the host is full");
  const std::string id = absl::StrCat(address_, "-sb", ++next_id_);
  v1::CreatedSandbox created;
  v1::Sandbox& sb = *created.mutable_sandbox();
  sb.set_sandbox_id(id);
  sb.set_home(absl::StrCat("/home/", id));
  sb.set_state(v1::SANDBOX_STATE_READY);
  *sb.mutable_spec() = spec;
  if (!spec.image().empty()) sb.set_image_digest(absl::StrCat("sha256:", spec.image()));
  live_[id] = sb;
  created_.push_back(spec);
  co_return created;
}

asio::awaitable<absl::StatusOr<v1::CreateSandboxesResponse>> FakeHost::Fork(v1::ForkSandboxRequest request,
                                                                            CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(request.sandbox_id()); !s.ok()) co_return s;
  ++fork_calls_;
  v1::CreateSandboxesResponse out;
  const uint32_t count = std::max<uint32_t>(request.count(), 1);
  for (uint32_t k = 0; k < count; ++k) {
    if (live_.size() >= capacity_) {
      out.set_rejected(count - k);
      out.set_rejected_reason("the host is full");
      break;
    }
    const std::string id = absl::StrCat(address_, "-sb", ++next_id_);
    v1::Sandbox sb = live_.at(request.sandbox_id());
    sb.set_sandbox_id(id);
    sb.set_home(absl::StrCat("/home/", id));
    sb.set_forked_from(request.sandbox_id());
    live_[id] = sb;
    files_[id] = files_[request.sandbox_id()];  // the parent's files as of the fork
    *out.add_sandboxes()->mutable_sandbox() = sb;
  }
  co_return out;
}

asio::awaitable<absl::StatusOr<v1::Sandbox>> FakeHost::GetSandbox(v1::GetSandboxRequest request, absl::Duration) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(request.sandbox_id()); !s.ok()) co_return s;
  co_return live_.at(request.sandbox_id());
}

asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> FakeHost::DeleteSandbox(v1::DeleteSandboxRequest request,
                                                                                   absl::Duration) {
  const std::string& sandbox_id = request.sandbox_id();
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  v1::DeleteSandboxResponse response;
  response.set_existed(true);
  *response.mutable_usage() = live_.at(sandbox_id).usage();
  live_.erase(sandbox_id);
  files_.erase(sandbox_id);
  deleted_.push_back(sandbox_id);
  // Its processes go with it.
  for (const auto& p : interactive_) {
    if (p->start().sandbox_id() == sandbox_id) p->Exit();
  }
  co_return response;
}

asio::awaitable<absl::StatusOr<ExecOutcome>> FakeHost::Exec(v1::ExecRequest request, size_t, CallOptions options) {
  bool hang;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = Known(request.sandbox_id()); !s.ok()) co_return s;
    execs_.push_back(request);
    hang = hang_execs_;
  }
  if (hang) {
    // A real host ends the process at the command's own timeout (exit.timed_out); the call ends at its deadline.
    const absl::Duration timeout = FromProto(request.command().timeout());
    const absl::Time killed_at = timeout > absl::ZeroDuration() ? clock_->Now() + timeout : absl::InfiniteFuture();
    const absl::Time deadline = options.deadline;
    options.deadline = std::min(deadline, killed_at);
    absl::Status s = co_await Hang(*clock_, options);
    if (s.code() != absl::StatusCode::kDeadlineExceeded || killed_at >= deadline) co_return s;
    ExecOutcome out;
    out.exited = true;
    out.exit.set_timed_out(true);
    out.exit.set_signal(9);
    co_return out;
  }
  std::function<ExecOutcome(const std::string&, const v1::ExecRequest&)> on_exec;
  {
    absl::MutexLock lock(&mu_);
    on_exec = on_exec_;
  }
  ExecOutcome out;
  out.exited = true;
  if (on_exec) out = on_exec(request.sandbox_id(), request);
  co_return out;
}

asio::awaitable<absl::Status> FakeHost::WriteFile(const std::string& sandbox_id, const v1::InlineFile& file,
                                                  CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  files_[sandbox_id][file.path()] = file.content();
  co_return absl::OkStatus();
}

void FakeHost::SetUsage(const std::string& sandbox_id, v1::ResourceUsage usage) {
  absl::MutexLock lock(&mu_);
  if (auto it = live_.find(sandbox_id); it != live_.end()) *it->second.mutable_usage() = std::move(usage);
}

asio::awaitable<absl::StatusOr<v1::Sandbox>> FakeHost::SetPaused(const std::string& sandbox_id, bool paused,
                                                                 CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  v1::Sandbox& sb = live_.at(sandbox_id);
  sb.set_state(paused ? v1::SANDBOX_STATE_PAUSED : v1::SANDBOX_STATE_READY);
  co_return sb;
}

asio::awaitable<absl::StatusOr<uint32_t>> FakeHost::KillAllProcesses(const std::string& sandbox_id, CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  co_return 0u;
}

asio::awaitable<absl::Status> FakeHost::Remove(const std::string& sandbox_id, const std::string& path, bool,
                                               CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  auto& files = files_[sandbox_id];
  std::erase_if(files, [&](const auto& f) { return f.first == path || f.first.starts_with(path + "/"); });
  std::erase_if(dirs_[sandbox_id], [&](const auto& d) { return d == path || d.starts_with(path + "/"); });
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> FakeHost::MakeDir(const std::string& sandbox_id, const std::string& path, CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  dirs_[sandbox_id].insert(path);
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::optional<std::string>>> FakeHost::ReadFile(const std::string& sandbox_id,
                                                                               const std::string& path,
                                                                               size_t max_bytes, CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  auto& files = files_[sandbox_id];
  auto f = files.find(path);
  if (f == files.end()) co_return std::optional<std::string>();
  co_return std::optional<std::string>(f->second.substr(0, max_bytes));
}

asio::awaitable<absl::StatusOr<v1::FileInfo>> FakeHost::Stat(const std::string& sandbox_id, const std::string& path,
                                                             CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  auto& files = files_[sandbox_id];
  v1::FileInfo info;
  info.set_path(path);
  info.set_name(path.substr(path.find_last_of('/') + 1));
  if (auto f = files.find(path); f != files.end()) {
    info.set_type(v1::FILE_TYPE_REGULAR);
    info.set_size(f->second.size());
    co_return info;
  }
  if (dirs_[sandbox_id].contains(path) ||
      std::any_of(files.begin(), files.end(), [&](const auto& f) { return f.first.starts_with(path + "/"); })) {
    info.set_type(v1::FILE_TYPE_DIRECTORY);
    co_return info;
  }
  co_return absl::NotFoundError(absl::StrCat("no such path: ", path));
}

asio::awaitable<absl::StatusOr<std::vector<v1::FileInfo>>> FakeHost::ListDir(const std::string& sandbox_id,
                                                                             const std::string& path, CallOptions) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(sandbox_id); !s.ok()) co_return s;
  std::map<std::string, v1::FileInfo> entries;
  for (const auto& [name, content] : files_[sandbox_id]) {
    if (!name.starts_with(path + "/")) continue;
    const std::string rest = name.substr(path.size() + 1);
    const size_t slash = rest.find('/');
    v1::FileInfo& e = entries[rest.substr(0, slash)];
    e.set_name(rest.substr(0, slash));
    e.set_path(absl::StrCat(path, "/", e.name()));
    e.set_type(slash == std::string::npos ? v1::FILE_TYPE_REGULAR : v1::FILE_TYPE_DIRECTORY);
    if (slash == std::string::npos) e.set_size(content.size());
  }
  for (const std::string& dir : dirs_[sandbox_id]) {
    if (!dir.starts_with(path + "/") || dir.find('/', path.size() + 1) != std::string::npos) continue;
    v1::FileInfo& e = entries[dir.substr(path.size() + 1)];
    e.set_name(dir.substr(path.size() + 1));
    e.set_path(dir);
    e.set_type(v1::FILE_TYPE_DIRECTORY);
  }
  if (entries.empty() && !dirs_[sandbox_id].contains(path)) {
    co_return absl::NotFoundError(absl::StrCat("no such directory: ", path));
  }
  std::vector<v1::FileInfo> out;
  for (auto& [name, e] : entries) out.push_back(std::move(e));
  co_return out;
}

asio::awaitable<absl::StatusOr<v1::Template>> FakeHost::PrepareTemplate(v1::PrepareTemplateRequest request,
                                                                        CallOptions) {
  absl::MutexLock lock(&mu_);
  templates_.push_back(request.key());
  if (!template_status_.ok()) co_return template_status_;
  v1::Template t;
  t.set_key(request.key());
  co_return t;
}

asio::awaitable<absl::StatusOr<v1::Image>> FakeHost::PullImage(const std::string& ref, CallOptions) {
  absl::MutexLock lock(&mu_);
  pulls_.push_back(ref);
  if (!pull_status_.ok()) co_return pull_status_;
  v1::Image image;
  image.set_digest(absl::StrCat("sha256:", ref));
  co_return image;
}

void FakeHost::OnInteractive(std::function<FakeInteractive::Script(const v1::ExecRequest&)> script_for) {
  absl::MutexLock lock(&mu_);
  script_for_ = std::move(script_for);
}

void FakeHost::FailInteractive(absl::Status status) {
  absl::MutexLock lock(&mu_);
  interactive_status_ = std::move(status);
}

std::vector<std::shared_ptr<FakeInteractive>> FakeHost::interactive() const {
  absl::MutexLock lock(&mu_);
  return interactive_;
}

asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> FakeHost::StartInteractive(v1::ExecRequest start,
                                                                                                ExecObserver observer) {
  absl::MutexLock lock(&mu_);
  if (auto s = Known(start.sandbox_id()); !s.ok()) co_return s;
  if (!interactive_status_.ok()) co_return std::exchange(interactive_status_, absl::OkStatus());
  FakeInteractive::Script script = script_for_ ? script_for_(start) : FakeInteractive::Script{};
  auto process =
      std::make_shared<FakeInteractive>(clock_, std::move(start), std::move(script), std::move(observer), next_pid_++);
  interactive_.push_back(process);
  co_return std::shared_ptr<InteractiveProcess>(process);
}

asio::awaitable<absl::StatusOr<v1::ListSandboxesResponse>> FakeHost::ListSandboxes(v1::ListSandboxesRequest request,
                                                                                   absl::Duration) {
  absl::MutexLock lock(&mu_);
  v1::ListSandboxesResponse out;
  for (const auto& [id, sb] : live_) {
    bool selected = true;
    for (const auto& [key, value] : request.label_selector()) {
      auto it = sb.spec().labels().find(key);
      selected = selected && it != sb.spec().labels().end() && it->second == value;
    }
    if (selected) *out.add_sandboxes() = sb;
  }
  co_return out;
}

}  // namespace corral::sandbox
