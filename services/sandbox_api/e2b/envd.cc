#include "services/sandbox_api/e2b/envd.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"
#include "libs/api/proto_time.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;

constexpr absl::Duration kOpenCache = absl::Seconds(10);
// How long a call waits for this replica's channel to a restarting host to connect again.
constexpr absl::Duration kHostWait = absl::Seconds(5);

// A process event as a Start or Connect stream sends it.
template <typename Response>
Response Framed(envd::ProcessEvent event) {
  Response r;
  *r.mutable_event() = std::move(event);
  return r;
}

}  // namespace

absl::Status FromEnvdJson(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto parsed = google::protobuf::util::JsonStringToMessage(json.empty() ? "{}" : json, message, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a ", message->GetDescriptor()->name(), " in JSON: ", std::string(parsed.message())));
  }
  return absl::OkStatus();
}

std::string ToEnvdJson(const google::protobuf::Message& message) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out);  // fails only on invalid UTF-8 in a string
  return out;
}

Envd::~Envd() {
  // The host kills what these calls started when they end.
  for (const auto& p : processes_->All()) {
    if (p->call() != nullptr) p->call()->Stop();
  }
}

absl::StatusOr<std::string> E2bPath(absl::string_view home, absl::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("path is required");
  if (path.front() == '/') return std::string(path);
  if (path == "~") return std::string(home);
  absl::ConsumePrefix(&path, "~/");
  return absl::StrCat(home, "/", path);
}

void Envd::Forget(const std::string& sandbox_id) {
  absl::MutexLock lock(&mu_);
  opened_.erase(sandbox_id);
}

void Envd::Remember(const v1::SandboxLease& lease) {
  auto host = leases_->Host(lease);
  if (!host.ok() || *host == nullptr || lease.paused()) return;  // Open will say why
  absl::MutexLock lock(&mu_);
  if (opened_.size() > 10000) opened_.clear();
  opened_[lease.lease_id()] = {EnvdSandbox{lease, *std::move(host)}, clock_->Now()};
  if (!lease.carried_processes().empty()) carried_[lease.lease_id()] = lease;
}

void Envd::ForgetIfGone(const EnvdSandbox& s, const absl::Status& status) {
  // The host names the sandbox in its NOT_FOUND ("sandbox '<id>' ..."); a missing file is NOT_FOUND too.
  if (status.code() == absl::StatusCode::kNotFound && absl::StartsWith(status.message(), "sandbox '")) {
    Forget(s.lease.lease_id());
  }
}

std::string EnvdUser(absl::string_view name) { return name == "user" ? std::string() : std::string(name); }

absl::Status CheckEnvdUser(const EnvdSandbox& s, bool files) {
  if (s.user.empty()) return absl::OkStatus();
  if (s.lease.image().empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("user '", s.user,
                     "': a Corral sandbox on the host's filesystem has one user, 'user' (unprivileged); root and "
                     "other users are served in sandboxes made from an image (a template built from one)"));
  }
  if (files && s.user != "root") {
    return absl::PermissionDeniedError(absl::StrCat("user '", s.user,
                                                    "': files are read and written as the sandbox's user or "
                                                    "root; run a command as '",
                                                    s.user, "' to act as it"));
  }
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<v1::SandboxLease>> Envd::AskLease(const std::string& id, const std::string& owner) {
  // The scheduler's channel has retried UNAVAILABLE already (libs/rpc/channel.h): what is left is an outage.
  auto lease = co_await leases_->Get(id, owner);
  const absl::StatusCode code = lease.status().code();
  if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded) co_return lease;
  co_return absl::InternalError(absl::StrCat("sandbox ", id, ": the scheduler that holds its lease cannot be reached (",
                                             lease.status().message(), "); the sandbox may well be running: retry"));
}

asio::awaitable<absl::StatusOr<EnvdSandbox>> Envd::Open(std::string id, std::string owner, bool fresh) {
  auto s = co_await OpenLease(std::move(id), std::move(owner), fresh);
  if (s.ok()) co_await leases_->AwaitHost(s->lease, kHostWait);
  if (s.ok()) co_await TakeUpCarried(*s);
  co_return s;
}

asio::awaitable<absl::StatusOr<std::shared_ptr<sandbox::InteractiveProcess>>> StartCarriable(
    const EnvdSandbox& s, v1::ExecRequest start, bool fork_ready,
    const std::function<sandbox::ExecObserver()>& observed) {
  start.mutable_command()->set_fork_ready(fork_ready && s.lease.image().empty());
  sandbox::ExecObserver observer = observed();  // named, not a temporary in the co_await (GCC 12)
  auto call = co_await s.host->StartInteractive(start, std::move(observer));
  if (!call.ok() && call.status().code() == absl::StatusCode::kFailedPrecondition && start.command().fork_ready()) {
    start.mutable_command()->set_fork_ready(false);
    observer = observed();
    call = co_await s.host->StartInteractive(std::move(start), std::move(observer));
  }
  co_return call;
}

asio::awaitable<void> Envd::TakeUpCarried(const EnvdSandbox& s) {
  v1::SandboxLease child;
  {
    absl::MutexLock lock(&mu_);
    auto it = carried_.find(s.lease.lease_id());
    if (it == carried_.end()) co_return;
    child = std::move(it->second);
    carried_.erase(it);
  }
  const std::vector<std::shared_ptr<EnvdProcess>> parents = processes_->List(child.parent_lease_id());
  for (const auto& [copy_id, parent_id] : child.carried_processes()) {
    auto parent = std::find_if(parents.begin(), parents.end(), [&](const std::shared_ptr<EnvdProcess>& p) {
      return p->call() != nullptr && p->call()->process_id() == parent_id;
    });
    if (parent == parents.end()) continue;  // not one of envd's (a session of the scheduler's)
    auto process = std::make_shared<EnvdProcess>(clock_, (*parent)->config(), (*parent)->tag());
    std::weak_ptr<EnvdProcesses> table = processes_;
    const std::string sandbox = child.lease_id();
    v1::AttachProcess attach;
    attach.set_sandbox_id(child.sandbox_id());
    attach.set_process_id(copy_id);
    // Named, not a temporary in the co_await (GCC 12 destroys those twice).
    sandbox::ExecObserver observer = EnvdProcess::Observe(process, [table, sandbox](EnvdProcess& p) {
      if (auto processes = table.lock()) processes->Remove(sandbox, p.pid());
    });
    auto call = co_await s.host->Attach(std::move(attach), std::move(observer));
    if (!call.ok()) {
      spdlog::warn("sandbox {}: taking up the carried process {}: {}", sandbox, copy_id,
                   std::string(call.status().message()));
      continue;
    }
    process->set_call(*call);
    if (!process->ended()) processes_->Add(sandbox, process);
    if (process->ended()) processes_->Remove(sandbox, process->pid());
  }
}

asio::awaitable<absl::StatusOr<EnvdSandbox>> Envd::OpenLease(std::string id, std::string owner, bool fresh) {
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = opened_.find(id);
    if (!fresh && it != opened_.end() && now - it->second.second < kOpenCache &&
        it->second.first.lease.owner() == owner) {
      co_return it->second.first;
    }
  }
  auto lease = co_await AskLease(id, owner);
  if (!lease.ok()) {
    if (lease.status().code() == absl::StatusCode::kNotFound) {
      co_return absl::UnavailableError(absl::StrCat("sandbox ", id, " is not running (killed or timed out)"));
    }
    co_return lease.status();
  }
  if (lease->paused()) {
    co_return absl::UnavailableError(absl::StrCat("sandbox ", id, " is paused (connecting to it resumes it)"));
  }
  auto host = leases_->Host(*lease);
  if (!host.ok()) co_return host.status();
  if (*host == nullptr) co_return absl::InternalError(absl::StrCat("sandbox ", id, ": no client for its host"));
  EnvdSandbox s{*std::move(lease), *std::move(host)};
  absl::MutexLock lock(&mu_);
  if (opened_.size() > 10000) opened_.clear();
  opened_[id] = {s, now};
  co_return s;
}

absl::StatusOr<std::shared_ptr<EnvdProcess>> Envd::Selected(const EnvdSandbox& s,
                                                            const envd::ProcessSelector& selector) const {
  switch (selector.selector_case()) {
    case envd::ProcessSelector::kPid: {
      auto p = processes_->Find(s.lease.lease_id(), selector.pid());
      if (p == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("process with pid ", selector.pid(), " not found (or started through another replica)"));
      }
      return p;
    }
    case envd::ProcessSelector::kTag: {
      auto p = processes_->FindTag(s.lease.lease_id(), selector.tag());
      if (p == nullptr) return absl::NotFoundError(absl::StrCat("process with tag '", selector.tag(), "' not found"));
      return p;
    }
    default: return absl::InvalidArgumentError("process (a pid or a tag) is required");
  }
}

asio::awaitable<absl::StatusOr<envd::ListResponse>> Envd::List(const EnvdSandbox& s, envd::ListRequest) {
  envd::ListResponse out;
  for (const auto& p : processes_->List(s.lease.lease_id())) {
    envd::ProcessInfo* info = out.add_processes();
    *info->mutable_config() = p->config();
    info->set_pid(p->pid());
    if (!p->tag().empty()) info->set_tag(p->tag());
  }
  co_return out;
}

asio::awaitable<absl::StatusOr<envd::SendInputResponse>> Envd::SendInput(const EnvdSandbox& s,
                                                                         envd::SendInputRequest request) {
  auto p = Selected(s, request.process());
  if (!p.ok()) co_return p.status();
  if (request.input().has_pty()) co_return absl::UnimplementedError("PTYs are not supported");
  if (!request.input().has_stdin()) co_return absl::InvalidArgumentError("input.stdin is required");
  (*p)->call()->Write(std::move(*request.mutable_input()->mutable_stdin()));
  co_return envd::SendInputResponse();
}

asio::awaitable<absl::StatusOr<envd::CloseStdinResponse>> Envd::CloseStdin(const EnvdSandbox& s,
                                                                           envd::CloseStdinRequest request) {
  auto p = Selected(s, request.process());
  if (!p.ok()) co_return p.status();
  (*p)->call()->CloseStdin();
  co_return envd::CloseStdinResponse();
}

asio::awaitable<absl::StatusOr<envd::SendSignalResponse>> Envd::SendSignal(const EnvdSandbox& s,
                                                                           envd::SendSignalRequest request) {
  auto p = Selected(s, request.process());
  if (!p.ok()) co_return p.status();
  if (request.signal() != envd::SIGNAL_SIGKILL && request.signal() != envd::SIGNAL_SIGTERM) {
    co_return absl::InvalidArgumentError("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
  }
  (*p)->call()->Signal(static_cast<int>(request.signal()));
  co_return envd::SendSignalResponse();
}

asio::awaitable<absl::StatusOr<envd::UpdateResponse>> Envd::Update(const EnvdSandbox&, envd::UpdateRequest) {
  co_return absl::UnimplementedError("PTYs are not supported");
}

template <typename Response>
asio::awaitable<absl::Status> Envd::Follow(std::shared_ptr<EnvdProcess> process, size_t next, absl::Time until,
                                           EnvdStream& out) {
  while (true) {
    const absl::Time now = clock_->Now();
    if (now >= until) co_return absl::DeadlineExceededError("the stream's timeout passed (the process lives on)");
    EnvdProcess::Batch batch = co_await process->Read(&next, std::min(until, now + kKeepalive));
    for (envd::ProcessEvent& event : batch.events) out.Send(Framed<Response>(std::move(event)));
    if (batch.events.empty() && !batch.ended && clock_->Now() < until) {
      envd::ProcessEvent keepalive;
      keepalive.mutable_keepalive();
      out.Send(Framed<Response>(std::move(keepalive)));
    }
    if (!co_await out.Flush()) co_return absl::CancelledError("the reader is gone");
    if (batch.ended) co_return absl::OkStatus();
  }
}

asio::awaitable<absl::Status> Envd::Start(const EnvdSandbox& s, envd::StartRequest request, absl::Duration timeout,
                                          EnvdStream& out) {
  if (request.has_pty()) co_return absl::UnimplementedError("PTYs are not supported: run commands without one");
  const envd::ProcessConfig& config = request.process();
  if (config.cmd().empty()) co_return absl::InvalidArgumentError("process.cmd is required");
  v1::ExecRequest start;
  start.set_sandbox_id(s.lease.sandbox_id());
  v1::Command* command = start.mutable_command();
  command->add_argv(config.cmd());
  for (const std::string& arg : config.args()) command->add_argv(arg);
  command->mutable_env()->insert(config.envs().begin(), config.envs().end());
  // Another user than the sandbox's starts where the image says (its WORKDIR), not in the E2B user's home.
  const bool has_cwd = config.has_cwd() && !config.cwd().empty();
  if (has_cwd || s.user.empty()) {
    auto dir = HostPath(has_cwd ? config.cwd() : options_.home);
    if (!dir.ok()) co_return dir.status();
    command->set_cwd(*dir);
  }
  command->set_user(s.user);
  ToProto(timeout, command->mutable_timeout());

  // The observer runs on gRPC threads, possibly after this Envd is gone (at shutdown): it holds the table weakly.
  std::weak_ptr<EnvdProcesses> table = processes_;
  const std::string sandbox = s.lease.lease_id();
  std::shared_ptr<EnvdProcess> process;
  const std::function<sandbox::ExecObserver()> observed = [&] {  // named: a temporary in a co_await (GCC 12)
    process = std::make_shared<EnvdProcess>(clock_, config, request.tag());
    return EnvdProcess::Observe(process, [table, sandbox](EnvdProcess& p) {
      if (auto processes = table.lock()) processes->Remove(sandbox, p.pid());
    });
  };
  auto call = co_await StartCarriable(s, std::move(start), options_.fork_ready, observed);
  if (!call.ok()) {
    if (call.status().code() == absl::StatusCode::kNotFound) Forget(sandbox);
    co_return call.status();
  }
  process->set_call(*call);
  if (!request.stdin()) (*call)->CloseStdin();
  if (!process->ended()) processes_->Add(sandbox, process);
  if (process->ended()) processes_->Remove(sandbox, process->pid());
  envd::ProcessEvent started;
  started.mutable_start()->set_pid(process->pid());
  out.Send(Framed<envd::StartResponse>(std::move(started)));
  if (!co_await out.Flush()) co_return absl::CancelledError("the reader is gone");  // the SDK waits for the pid
  // The process outlives this stream (as envd's): its call ends with it, and the table forgets it then.
  co_return co_await Follow<envd::StartResponse>(process, 0, absl::InfiniteFuture(), out);
}

asio::awaitable<absl::Status> Envd::Connect(const EnvdSandbox& s, envd::ConnectRequest request, absl::Duration timeout,
                                            EnvdStream& out) {
  auto p = Selected(s, request.process());
  if (!p.ok()) co_return p.status();
  envd::ProcessEvent started;
  started.mutable_start()->set_pid((*p)->pid());
  out.Send(Framed<envd::ConnectResponse>(std::move(started)));
  if (!co_await out.Flush()) co_return absl::CancelledError("the reader is gone");
  // What comes from now on, as envd's Connect.
  co_return co_await Follow<envd::ConnectResponse>(*p, (*p)->end_index(), clock_->Now() + timeout, out);
}

}  // namespace corral::sandbox_api
