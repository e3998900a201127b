#include "services/sandbox_host/image_reactor.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/convert.h"

namespace corral::sandbox {
namespace {
constexpr size_t kMaxChunk = 1 << 20;
}  // namespace

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
  if (request_.data().size() > kMaxChunk) return absl::InvalidArgumentError("data chunks must be at most 1 MiB");
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

}  // namespace corral::sandbox
