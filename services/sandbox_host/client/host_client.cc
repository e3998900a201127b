#include "services/sandbox_host/client/host_client.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "libs/core/clock.h"
#include "libs/rpc/async_grpc.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/client/interactive.h"
#include "services/sandbox_host/client/output_tail.h"

namespace corral::sandbox {

namespace asio = boost::asio;

HostClient::HostClient(std::string address, std::shared_ptr<grpc::Channel> channel, std::string token)
    : address_(std::move(address)), stub_(v1::SandboxHost::NewStub(channel)), token_(std::move(token)) {}

namespace {
absl::Time After(absl::Duration d) { return ProcessNow() + d; }
}  // namespace

asio::awaitable<absl::StatusOr<v1::HostInfoResponse>> HostClient::HostInfo(absl::Duration timeout) {
  rpc::CallScope scope(nullptr, After(timeout), token_);
  v1::HostInfoRequest request;
  v1::HostInfoResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->HostInfo(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::CreatedSandbox>> HostClient::Create(const v1::SandboxSpec& spec,
                                                                       CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::CreateSandboxesRequest request;
  request.set_count(1);
  *request.mutable_spec() = spec;
  v1::CreateSandboxesResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->CreateSandboxes(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  if (response.sandboxes_size() != 1) {
    co_return absl::ResourceExhaustedError(
        absl::StrCat("host ", address_, " rejected the sandbox (", response.rejected_reason(), ")"));
  }
  co_return response.sandboxes(0);
}

asio::awaitable<absl::StatusOr<v1::CreateSandboxesResponse>> HostClient::Fork(v1::ForkSandboxRequest request,
                                                                              CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::CreateSandboxesResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->ForkSandbox(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::Sandbox>> HostClient::GetSandbox(v1::GetSandboxRequest request,
                                                                    absl::Duration timeout) {
  rpc::CallScope scope(nullptr, After(timeout), token_);
  v1::Sandbox response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->GetSandbox(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::DeleteSandboxResponse>> HostClient::DeleteSandbox(v1::DeleteSandboxRequest request,
                                                                                     absl::Duration timeout) {
  rpc::CallScope scope(nullptr, After(timeout), token_);
  v1::DeleteSandboxResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->DeleteSandbox(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<ExecOutcome>> HostClient::Exec(v1::ExecRequest request, size_t output_limit,
                                                              CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  // Filled on gRPC's threads, read after the call completed (the completion is the synchronization point).
  struct State {
    explicit State(size_t limit) : output(limit), head_limit(limit) {}
    void Head(std::string& head, const std::string& data) const {
      if (head.size() < head_limit) head.append(data, 0, std::min(data.size(), head_limit - head.size()));
    }
    absl::Mutex mu;
    OutputTail output;
    OutputTail last{2048};
    OutputTail stdout_last{8192};
    const size_t head_limit;
    ExecOutcome outcome;
  };
  auto state = std::make_shared<State>(output_limit);
  grpc::Status s = co_await rpc::AwaitGrpc([&](auto done) {
    auto* reader = new rpc::StreamReader<v1::ExecEvent>(
        [state](const v1::ExecEvent& ev) {
          absl::MutexLock lock(&state->mu);
          if (!ev.stdout().empty()) {
            state->output.Append(ev.stdout());
            state->last.Append(ev.stdout());
            state->stdout_last.Append(ev.stdout());
            state->Head(state->outcome.stdout_head, ev.stdout());
          }
          if (!ev.stderr().empty()) {
            state->output.Append(ev.stderr());
            state->last.Append(ev.stderr());
            state->Head(state->outcome.stderr_head, ev.stderr());
          }
          if (ev.has_exited()) {
            state->outcome.exit = ev.exited();
            state->outcome.exited = true;
          }
        },
        std::move(done));
    stub_->async()->Exec(scope.context(), &request, reader);
    reader->Begin();
  });
  absl::MutexLock lock(&state->mu);
  if (!s.ok() && !state->outcome.exited) co_return FromGrpcStatus(s);
  state->outcome.output = state->output.Text();
  state->outcome.tail = state->last.Last(1024);
  state->outcome.stdout_tail = state->stdout_last.Last(4096);
  co_return std::move(state->outcome);
}

asio::awaitable<absl::StatusOr<v1::Sandbox>> HostClient::SetPaused(const std::string& sandbox_id, bool paused,
                                                                   CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::Sandbox response;
  grpc::Status s;
  if (paused) {
    v1::PauseSandboxRequest request;
    request.set_sandbox_id(sandbox_id);
    s = co_await rpc::AwaitGrpc(
        [&](auto done) { stub_->async()->PauseSandbox(scope.context(), &request, &response, std::move(done)); });
  } else {
    v1::ResumeSandboxRequest request;
    request.set_sandbox_id(sandbox_id);
    s = co_await rpc::AwaitGrpc(
        [&](auto done) { stub_->async()->ResumeSandbox(scope.context(), &request, &response, std::move(done)); });
  }
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<uint32_t>> HostClient::KillAllProcesses(const std::string& sandbox_id,
                                                                       CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::KillAllProcessesRequest request;
  request.set_sandbox_id(sandbox_id);
  v1::KillAllProcessesResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->KillAllProcesses(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response.killed();
}

asio::awaitable<absl::Status> HostClient::Remove(const std::string& sandbox_id, const std::string& path, bool recursive,
                                                 CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::RemoveRequest request;
  request.set_sandbox_id(sandbox_id);
  request.set_path(path);
  request.set_recursive(recursive);
  v1::RemoveResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->Remove(scope.context(), &request, &response, std::move(done)); });
  // A path that is not there is what was asked for; a missing sandbox is not.
  if (s.error_code() == grpc::StatusCode::NOT_FOUND && !absl::StartsWith(s.error_message(), "sandbox '")) {
    co_return absl::OkStatus();
  }
  co_return FromGrpcStatus(s);
}

asio::awaitable<absl::Status> HostClient::MakeDir(const std::string& sandbox_id, const std::string& path,
                                                  CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::MakeDirRequest request;
  request.set_sandbox_id(sandbox_id);
  request.set_path(path);
  request.set_make_parents(true);
  v1::FileInfo response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->MakeDir(scope.context(), &request, &response, std::move(done)); });
  co_return FromGrpcStatus(s);
}

asio::awaitable<absl::Status> HostClient::WriteFile(const std::string& sandbox_id, const v1::InlineFile& file,
                                                    CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  std::vector<v1::WriteFileRequest> requests(1);
  v1::WriteFileHeader* header = requests[0].mutable_header();
  header->set_sandbox_id(sandbox_id);
  header->set_path(file.path());
  header->set_permissions(file.permissions() == 0 ? 0644 : file.permissions());
  header->set_make_parents(true);
  header->set_size(file.content().size());
  constexpr size_t kChunk = 1 << 20;
  for (size_t at = 0; at < file.content().size(); at += kChunk) {
    requests.emplace_back().set_data(file.content().substr(at, kChunk));
  }
  v1::FileInfo info;
  grpc::Status s = co_await rpc::AwaitGrpc([&](auto done) {
    auto* writer = new rpc::StreamWriter<v1::WriteFileRequest>(std::move(requests), std::move(done));
    stub_->async()->WriteFile(scope.context(), &info, writer);
    writer->Begin();
  });
  co_return FromGrpcStatus(s);
}

asio::awaitable<absl::StatusOr<std::optional<std::string>>> HostClient::ReadFile(const std::string& sandbox_id,
                                                                                 const std::string& path,
                                                                                 size_t max_bytes,
                                                                                 CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::ReadFileRequest request;
  request.set_sandbox_id(sandbox_id);
  request.set_path(path);
  request.set_length(max_bytes);
  auto data = std::make_shared<std::string>();
  auto mu = std::make_shared<absl::Mutex>();
  grpc::Status s = co_await rpc::AwaitGrpc([&](auto done) {
    auto* reader = new rpc::StreamReader<v1::ReadFileResponse>(
        [data, mu](const v1::ReadFileResponse& r) {
          absl::MutexLock lock(mu.get());
          data->append(r.data());
        },
        std::move(done));
    stub_->async()->ReadFile(scope.context(), &request, reader);
    reader->Begin();
  });
  if (s.error_code() == grpc::StatusCode::NOT_FOUND && !absl::StartsWith(s.error_message(), "sandbox '")) {
    co_return std::optional<std::string>();
  }
  if (!s.ok()) co_return FromGrpcStatus(s);
  absl::MutexLock lock(mu.get());
  co_return std::optional<std::string>(std::move(*data));
}

asio::awaitable<absl::StatusOr<v1::Template>> HostClient::PrepareTemplate(v1::PrepareTemplateRequest request,
                                                                          CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::Template response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->PrepareTemplate(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::Image>> HostClient::PullImage(const std::string& ref, CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::PullImageRequest request;
  request.set_ref(ref);
  auto image = std::make_shared<v1::Image>();
  auto mu = std::make_shared<absl::Mutex>();
  grpc::Status s = co_await rpc::AwaitGrpc([&](auto done) {
    auto* reader = new rpc::StreamReader<v1::PullImageProgress>(
        [image, mu](const v1::PullImageProgress& p) {
          absl::MutexLock lock(mu.get());
          if (p.has_image()) *image = p.image();
        },
        std::move(done));
    stub_->async()->PullImage(scope.context(), &request, reader);
    reader->Begin();
  });
  if (!s.ok()) co_return FromGrpcStatus(s);
  absl::MutexLock lock(mu.get());
  if (image->digest().empty()) co_return absl::InternalError(absl::StrCat("host ", address_, " pulled no image"));
  co_return *image;
}

asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> HostClient::StartInteractive(
    v1::ExecRequest start, ExecObserver observer) {
  v1::ExecInput first;
  *first.mutable_start() = std::move(start);
  co_return co_await InteractiveCall::Start(stub_.get(), token_, std::move(first), std::move(observer));
}

asio::awaitable<absl::StatusOr<std::shared_ptr<InteractiveProcess>>> HostClient::Attach(v1::AttachProcess attach,
                                                                                        ExecObserver observer) {
  v1::ExecInput first;
  *first.mutable_attach() = std::move(attach);
  co_return co_await InteractiveCall::Start(stub_.get(), token_, std::move(first), std::move(observer));
}

asio::awaitable<absl::StatusOr<v1::FileInfo>> HostClient::Stat(const std::string& sandbox_id, const std::string& path,
                                                               CallOptions options) {
  rpc::CallScope scope(options.control, options.deadline, token_);
  v1::StatRequest request;
  request.set_sandbox_id(sandbox_id);
  request.set_path(path);
  v1::FileInfo response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->Stat(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

asio::awaitable<absl::StatusOr<std::vector<v1::FileInfo>>> HostClient::ListDir(const std::string& sandbox_id,
                                                                               const std::string& path,
                                                                               CallOptions options) {
  std::vector<v1::FileInfo> entries;
  v1::ListDirRequest request;
  request.set_sandbox_id(sandbox_id);
  request.set_path(path);
  request.set_page_size(1000);
  do {
    rpc::CallScope scope(options.control, options.deadline, token_);
    v1::ListDirResponse response;
    grpc::Status s = co_await rpc::AwaitGrpc(
        [&](auto done) { stub_->async()->ListDir(scope.context(), &request, &response, std::move(done)); });
    if (!s.ok()) co_return FromGrpcStatus(s);
    for (v1::FileInfo& e : *response.mutable_entries()) entries.push_back(std::move(e));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  co_return entries;
}

asio::awaitable<absl::StatusOr<v1::ListSandboxesResponse>> HostClient::ListSandboxes(v1::ListSandboxesRequest request,
                                                                                     absl::Duration timeout) {
  rpc::CallScope scope(nullptr, After(timeout), token_);
  v1::ListSandboxesResponse response;
  grpc::Status s = co_await rpc::AwaitGrpc(
      [&](auto done) { stub_->async()->ListSandboxes(scope.context(), &request, &response, std::move(done)); });
  if (!s.ok()) co_return FromGrpcStatus(s);
  co_return response;
}

}  // namespace corral::sandbox
