// The sandbox host integration fixture: a real corral-sandbox-host (root) on loopback with capacity 4, a uid
// block of its own, and helpers that drive its API as a client would.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "corral/v1/sandbox.grpc.pb.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/token.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tests/support/subprocess.h"
#include "tests/support/uid_range.h"

namespace corral {

struct ExecResult {
  absl::Status status;
  std::string out, err;
  v1::ExitStatus exit;
};

class SandboxHostApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the sandbox host needs root";
    dir_ = testing::MakeTestDir();
    root_ = "/var/tmp/corral-it-" + std::to_string(getpid());
    token_ = MintClusterToken(*TokenSigner::FromKeyFile(testing::WriteSecretFile(dir_)));
    // A tiny uid range of its own, so a uid comes back right after teardown (and tests never collide).
    uids_.emplace(45000, 59999, 4);
    StartHost();
  }
  // Starts (or, after a kill, restarts) the host on the fixture's root and uids.
  void StartHost() {
    stub_.reset();
    service_.reset();
    auto service = testing::StartService(
        CORRAL_SANDBOX_HOST,
        {"--secret-file=" + dir_ + "/secret", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
         "--root=" + root_, "--capacity=4", "--uid-first=" + std::to_string(uids_->first()),
         "--uid-last=" + std::to_string(uids_->last()), "--host-id=it"},
        dir_, "sandbox-host");
    ASSERT_THAT(service, IsOk());
    service_.emplace(*std::move(service));
    ChannelOptions options;
    options.retry_unavailable = false;
    stub_ = v1::SandboxHost::NewStub(*MakeChannel(service_->ready.grpc, options));
  }
  void TearDown() override {
    stub_.reset();
    if (service_) {
      service_->process.Signal(SIGTERM);
      (void)service_->process.Wait(absl::Seconds(30));
    }
    std::filesystem::remove_all(root_);
  }

  void Prepare(grpc::ClientContext& ctx, const std::string& token) {
    SetDeadline(ctx, absl::Seconds(60));
    AttachBearer(ctx, token);
  }

  absl::StatusOr<v1::CreateSandboxesResponse> Create(int count, v1::SandboxSpec spec = {}) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::CreateSandboxesRequest req;
    req.set_count(static_cast<uint32_t>(count));
    *req.mutable_spec() = spec;
    req.mutable_spec()->add_task_paths("/workspace");
    v1::CreateSandboxesResponse resp;
    grpc::Status s = stub_->CreateSandboxes(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }

  absl::StatusOr<v1::CreateSandboxesResponse> Fork(const std::string& id, int count, const std::string& token) {
    grpc::ClientContext ctx;
    Prepare(ctx, token);
    v1::ForkSandboxRequest req;
    req.set_sandbox_id(id);
    req.set_count(static_cast<uint32_t>(count));
    v1::CreateSandboxesResponse resp;
    grpc::Status s = stub_->ForkSandbox(&ctx, req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }

  // GetSandbox, PauseSandbox (`paused`) or ResumeSandbox (`!paused`), with the cluster token.
  absl::StatusOr<v1::Sandbox> GetSandbox(const std::string& id, std::optional<bool> paused = std::nullopt) {
    grpc::ClientContext ctx;
    Prepare(ctx, token_);
    v1::Sandbox sb;
    grpc::Status s;
    if (!paused) {
      v1::GetSandboxRequest req;
      req.set_sandbox_id(id);
      s = stub_->GetSandbox(&ctx, req, &sb);
    } else if (*paused) {
      v1::PauseSandboxRequest req;
      req.set_sandbox_id(id);
      s = stub_->PauseSandbox(&ctx, req, &sb);
    } else {
      v1::ResumeSandboxRequest req;
      req.set_sandbox_id(id);
      s = stub_->ResumeSandbox(&ctx, req, &sb);
    }
    if (!s.ok()) return FromGrpcStatus(s);
    return sb;
  }

  // Runs `script` with /bin/sh, as `user` (Command.user) when given.
  ExecResult Exec(const std::string& id, const std::string& token, const std::string& script,
                  const std::string& user = "") {
    grpc::ClientContext ctx;
    Prepare(ctx, token);
    v1::ExecRequest req;
    req.set_sandbox_id(id);
    req.mutable_command()->set_user(user);
    for (const char* a : {"/bin/sh", "-c"}) req.mutable_command()->add_argv(a);
    req.mutable_command()->add_argv(script);
    auto reader = stub_->Exec(&ctx, req);
    ExecResult r;
    v1::ExecEvent ev;
    while (reader->Read(&ev)) {
      if (ev.has_stdout()) r.out += ev.stdout();
      if (ev.has_stderr()) r.err += ev.stderr();
      if (ev.has_exited()) r.exit = ev.exited();
    }
    r.status = FromGrpcStatus(reader->Finish());
    return r;
  }

  absl::StatusOr<std::string> ReadFile(const std::string& id, const std::string& token, const std::string& path) {
    grpc::ClientContext ctx;
    Prepare(ctx, token);
    v1::ReadFileRequest req;
    req.set_sandbox_id(id);
    req.set_path(path);
    auto reader = stub_->ReadFile(&ctx, req);
    std::string data;
    v1::ReadFileResponse resp;
    while (reader->Read(&resp)) data += resp.data();
    absl::Status s = FromGrpcStatus(reader->Finish());
    if (!s.ok()) return s;
    return data;
  }

  absl::Status WriteFile(const std::string& id, const std::string& token, const std::string& path,
                         const std::string& data) {
    grpc::ClientContext ctx;
    Prepare(ctx, token);
    v1::FileInfo info;
    auto writer = stub_->WriteFile(&ctx, &info);
    v1::WriteFileRequest header;
    header.mutable_header()->set_sandbox_id(id);
    header.mutable_header()->set_path(path);
    header.mutable_header()->set_make_parents(true);
    writer->Write(header);
    v1::WriteFileRequest chunk;
    chunk.set_data(data);
    writer->Write(chunk);
    writer->WritesDone();
    return FromGrpcStatus(writer->Finish());
  }

  std::optional<testing::UidRange> uids_;
  std::string dir_, root_, token_;
  std::optional<testing::RunningService> service_;
  std::unique_ptr<v1::SandboxHost::Stub> stub_;
};

}  // namespace corral
