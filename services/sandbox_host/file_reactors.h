// Streaming file reactors: WriteFile (client stream: a header, then data chunks; committed atomically when the
// stream ends OK) and ReadFile (server stream: the file's info, then ranged chunks). Both go through the
// sandbox-path walker, so nothing outside the home is ever opened.
#pragma once

#include <optional>

#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/linux/sandbox_path.h"
#include "services/sandbox_host/sandbox_manager.h"

namespace corral::sandbox {

class WriteFileReactor final : public grpc::ServerReadReactor<v1::WriteFileRequest> {
 public:
  WriteFileReactor(SandboxManager* sandboxes, const CallAuthenticator* auth, grpc::CallbackServerContext* ctx,
                   v1::FileInfo* response);
  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  absl::Status Handle();
  absl::Status Commit();

  SandboxManager* const sandboxes_;
  const CallAuthenticator* const auth_;
  grpc::CallbackServerContext* const ctx_;
  v1::FileInfo* const response_;
  v1::WriteFileRequest request_;
  std::shared_ptr<const Sandbox> sandbox_;
  std::optional<SandboxPath> path_;
  std::optional<FileWriter> writer_;
  std::optional<uint64_t> expected_size_;
};

class ReadFileReactor final : public grpc::ServerWriteReactor<v1::ReadFileResponse> {
 public:
  ReadFileReactor(SandboxManager* sandboxes, const CallAuthenticator* auth, grpc::CallbackServerContext* ctx,
                  const v1::ReadFileRequest& request);
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  void WriteNext();

  UniqueFd fd_;
  uint64_t offset_ = 0;
  uint64_t end_ = 0;
  size_t chunk_ = 256 * 1024;
  v1::ReadFileResponse message_;
};

}  // namespace corral::sandbox
