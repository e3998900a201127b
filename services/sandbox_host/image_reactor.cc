#include "services/sandbox_host/image_reactor.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/convert.h"

namespace corral::sandbox {
namespace {}  // namespace

ImportImageReactor::ImportImageReactor(ImageStore* images, const CallAuthenticator* auth, WorkerPool* workers,
                                       grpc::CallbackServerContext* ctx, v1::Image* response)
    : images_(images), auth_(auth), workers_(workers), ctx_(ctx), response_(response) {
  if (absl::Status s = auth_->CheckCluster(*ctx_); !s.ok()) {
    Finish(ToGrpcStatus(s));
    return;
  }
  StartRead(&request_);
}

absl::Status ImportImageReactor::Handle() {
  if (request_.has_header()) {
    if (header_) return absl::InvalidArgumentError("a second header; send the header once, then data");
    header_ = request_.header();
    auto file = images_->NewImportFile();
    if (!file.ok()) return file.status();
    file_ = *std::move(file);
    return absl::OkStatus();
  }
  if (!header_) return absl::InvalidArgumentError("the first message must be the header");
  if (request_.data().size() > kMaxDataChunk) return absl::InvalidArgumentError("data chunks must be at most 1 MiB");
  received_ += request_.data().size();
  if (header_->has_size() && received_ > header_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("more bytes than the header announced (", header_->size(), ")"));
  }
  for (size_t done = 0; done < request_.data().size();) {
    const ssize_t n = write(file_.get(), request_.data().data() + done, request_.data().size() - done);
    if (n <= 0) {
      return errno == ENOSPC ? absl::ResourceExhaustedError("the host's image store is out of disk space")
                             : absl::InternalError(absl::StrCat("writing the archive: ", strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void ImportImageReactor::Import() {
  absl::Status status = [&]() -> absl::Status {
    if (!header_) return absl::InvalidArgumentError("no header was sent");
    if (header_->has_size() && received_ != header_->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("received ", received_, " bytes but the header announced ", header_->size()));
    }
    if (lseek(file_.get(), 0, SEEK_SET) != 0) return absl::InternalError("rewinding the archive");
    auto image = images_->ImportArchive(file_.get(), header_->ref());
    if (!image.ok()) return image.status();
    ToProto(*image, response_);
    return absl::OkStatus();
  }();
  file_.Reset();
  Finish(ToGrpcStatus(status));
}

void ImportImageReactor::OnReadDone(bool ok) {
  if (!ok) {
    if (ctx_->IsCancelled()) {
      Finish(ToGrpcStatus(absl::CancelledError("the stream broke")));
      return;
    }
    RunOn(workers_, [this] { Import(); });  // the client half-closed: the whole archive is here
    return;
  }
  if (absl::Status s = Handle(); !s.ok()) {
    file_.Reset();
    Finish(ToGrpcStatus(s));
    return;
  }
  StartRead(&request_);
}

PullImageReactor::PullImageReactor(ImagePuller* puller, const CallAuthenticator* auth, WorkerPool* workers,
                                   grpc::CallbackServerContext* ctx, const v1::PullImageRequest* request)
    : puller_(puller), ref_(request->ref()) {
  absl::Status s = auth->CheckCluster(*ctx);
  if (s.ok() && ref_.empty()) s = absl::InvalidArgumentError("ref is required: registry/repository[:tag][@sha256:…]");
  if (s.ok()) s = ParseImageReference(ref_).status();
  if (s.ok() && puller_ == nullptr) s = absl::FailedPreconditionError("this host does not pull images");
  if (!s.ok()) {
    Finish(ToGrpcStatus(s));
    return;
  }
  RunOn(workers, [this] { Pull(); });
}

void PullImageReactor::Pull() {
  auto image = puller_->Pull(ref_, [this](const PullProgress& p) { Offer(p); });
  Next next = Next::kNothing;
  {
    absl::MutexLock lock(&mu_);
    pending_.reset();
    final_ = image.status();
    if (image.ok()) {
      pending_.emplace();
      pending_->set_step("done");
      ToProto(*image, pending_->mutable_image());
    }
    if (!writing_) next = NextLocked();
  }
  if (next != Next::kNothing) Perform(next);  // kNothing: OnWriteDone may have ended the RPC meanwhile
}

void PullImageReactor::Offer(const PullProgress& p) {
  Next next = Next::kNothing;
  {
    absl::MutexLock lock(&mu_);
    pending_.emplace();
    pending_->set_step(p.step);
    pending_->set_done_bytes(p.done_bytes);
    pending_->set_total_bytes(p.total_bytes);
    if (!writing_) next = NextLocked();
  }
  if (next != Next::kNothing) Perform(next);  // kNothing: OnWriteDone may have ended the RPC meanwhile
}

PullImageReactor::Next PullImageReactor::NextLocked() {
  if (finished_) return Next::kNothing;
  if (final_ && (broken_ || !pending_)) {  // nothing (more) to show: end with the pull's status
    finished_ = true;
    finish_status_ = ToGrpcStatus(*final_);
    return Next::kFinish;
  }
  if (broken_ || !pending_) return Next::kNothing;
  writing_message_ = *std::move(pending_);
  pending_.reset();
  writing_ = true;
  if (!final_) return Next::kWrite;
  finished_ = true;
  return Next::kWriteAndFinish;
}

void PullImageReactor::Perform(Next next) {
  // Nothing else touches writing_message_ or finish_status_ once NextLocked chose to send them. A finish is the
  // last thing done with `this`: OnDone may delete it as soon as the RPC is over.
  switch (next) {
    case Next::kNothing: return;  // callers skip it
    case Next::kWrite: StartWrite(&writing_message_); return;
    case Next::kWriteAndFinish: StartWriteAndFinish(&writing_message_, grpc::WriteOptions(), grpc::Status::OK); return;
    case Next::kFinish: Finish(finish_status_); return;
  }
}

void PullImageReactor::OnWriteDone(bool ok) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) broken_ = true;
    next = NextLocked();
  }
  if (next != Next::kNothing) Perform(next);
}

}  // namespace corral::sandbox
