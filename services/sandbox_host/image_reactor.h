// ImportImage's reactor: the client streams an oci-archive; it is written to an anonymous file as it arrives
// and, once the stream ends, imported into the ImageStore on a worker thread (unpacking layers takes seconds;
// no gRPC thread waits for it).
#pragma once

#include <optional>

#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/core/unique_fd.h"
#include "libs/core/worker_pool.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/image_store.h"

namespace corral::sandbox {

class ImportImageReactor final : public grpc::ServerReadReactor<v1::ImportImageRequest> {
 public:
  ImportImageReactor(ImageStore* images, const CallAuthenticator* auth, WorkerPool* workers,
                     grpc::CallbackServerContext* ctx, v1::Image* response);
  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  absl::Status Handle();
  void Import();  // on a worker

  ImageStore* const images_;
  const CallAuthenticator* const auth_;
  WorkerPool* const workers_;
  grpc::CallbackServerContext* const ctx_;
  v1::Image* const response_;
  v1::ImportImageRequest request_;
  std::optional<v1::ImportImageHeader> header_;
  UniqueFd file_;
  uint64_t received_ = 0;
};

}  // namespace corral::sandbox
