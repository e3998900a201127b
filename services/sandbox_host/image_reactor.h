// The image RPCs' reactors. ImportImage: the client streams an oci-archive; it is written to an anonymous file
// as it arrives and, once the stream ends, imported into the ImageStore on an image worker (unpacking layers
// takes seconds; no gRPC thread waits for it). PullImage: the pull runs on an image worker and its progress is
// streamed, the latest state only while the client reads the previous one.
#pragma once

#include <optional>

#include "absl/synchronization/mutex.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/core/unique_fd.h"
#include "libs/core/worker_pool.h"
#include "libs/rpc/auth.h"
#include "services/sandbox_host/images/image_pull.h"
#include "services/sandbox_host/images/image_store.h"

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

class PullImageReactor final : public grpc::ServerWriteReactor<v1::PullImageProgress> {
 public:
  PullImageReactor(ImagePuller* puller, const CallAuthenticator* auth, WorkerPool* workers,
                   grpc::CallbackServerContext* ctx, const v1::PullImageRequest* request);
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  // What to send next, chosen under mu_ and done after it is released: a Finish issued from the worker while it
  // still held mu_ let OnDone delete the reactor (and mu_) before the worker unlocked it.
  enum class Next { kNothing, kWrite, kWriteAndFinish, kFinish };

  void Pull();  // on a worker
  void Offer(const PullProgress& progress);
  Next NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Perform(Next next);

  ImagePuller* const puller_;
  const std::string ref_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed: the client is gone
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::PullImageProgress> pending_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> final_ ABSL_GUARDED_BY(mu_);  // set once the pull ended
  v1::PullImageProgress writing_message_;  // set under mu_ by NextLocked, then only read by the write it starts
  grpc::Status finish_status_;             // likewise, for the Finish
};

}  // namespace corral::sandbox
