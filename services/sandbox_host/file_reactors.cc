#include "services/sandbox_host/file_reactors.h"

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "libs/rpc/status_conversion.h"
#include "services/sandbox_host/convert.h"
#include "services/sandbox_host/sandbox_ops.h"

namespace corral::sandbox {
namespace {}  // namespace

// ---------------------------------------------------------------------------------------------- WriteFile

WriteFileReactor::WriteFileReactor(SandboxManager* sandboxes, const CallAuthenticator* auth,
                                   grpc::CallbackServerContext* ctx, v1::FileInfo* response)
    : sandboxes_(sandboxes), auth_(auth), ctx_(ctx), response_(response) {
  StartRead(&request_);
}

absl::Status WriteFileReactor::Handle() {
  if (request_.has_header()) {
    if (writer_) return absl::InvalidArgumentError("a second header; send the header once, then data");
    const v1::WriteFileHeader& h = request_.header();
    if (auto s = AuthorizeSandbox(*auth_, *sandboxes_, *ctx_, h.sandbox_id()); !s.ok()) return s;
    auto sb = sandboxes_->Find(h.sandbox_id());
    if (!sb.ok()) return sb.status();
    sandbox_ = *sb;
    auto path = sandbox_->ParsePath(h.path());
    if (!path.ok()) return path.status();
    path_ = *path;
    WriteMode mode = h.write_mode() == v1::WRITE_MODE_APPEND       ? WriteMode::kAppend
                     : h.write_mode() == v1::WRITE_MODE_CREATE_NEW ? WriteMode::kCreate
                                                                   : WriteMode::kReplace;
    if (h.has_size()) {
      expected_size_ = h.size();
      if (sandbox_->spec.rlimits.file_size_bytes > 0 &&
          h.size() > static_cast<uint64_t>(sandbox_->spec.rlimits.file_size_bytes)) {
        return absl::ResourceExhaustedError("the file would exceed the sandbox's max file size");
      }
    }
    const mode_t perms = h.permissions() == 0 ? 0644 : (h.permissions() & 0777);
    auto writer =
        FileWriter::Open(sandbox_->home_fd.get(), *path_, mode, perms, sandbox_->FileOwner(), h.make_parents());
    if (!writer.ok()) return writer.status();
    writer_.emplace(*std::move(writer));
    return absl::OkStatus();
  }
  if (!writer_) return absl::InvalidArgumentError("the first message must be the header");
  if (request_.data().size() > kMaxDataChunk) return absl::InvalidArgumentError("data chunks must be at most 1 MiB");
  const int64_t cap = sandbox_->spec.rlimits.file_size_bytes;
  if (cap > 0 && writer_->written() + static_cast<int64_t>(request_.data().size()) > cap) {
    return absl::ResourceExhaustedError("the file would exceed the sandbox's max file size");
  }
  return writer_->Write(request_.data());
}

absl::Status WriteFileReactor::Commit() {
  if (!writer_) return absl::InvalidArgumentError("no header was sent");
  if (expected_size_ && static_cast<uint64_t>(writer_->written()) != *expected_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("received ", writer_->written(), " bytes but the header announced ", *expected_size_));
  }
  if (auto s = writer_->Commit(); !s.ok()) return s;
  auto st = StatPath(sandbox_->home_fd.get(), *path_);
  if (!st.ok()) return st.status();
  ToProto(*st, path_->normalized, path_->components.back(), "", response_);
  return absl::OkStatus();
}

void WriteFileReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed: the file appears now (or, on error, never; the temp file is removed).
    absl::Status s = ctx_->IsCancelled() ? absl::CancelledError("the stream broke") : Commit();
    writer_.reset();
    Finish(ToGrpcStatus(s));
    return;
  }
  if (absl::Status s = Handle(); !s.ok()) {
    writer_.reset();
    Finish(ToGrpcStatus(s));
    return;
  }
  StartRead(&request_);
}

// ---------------------------------------------------------------------------------------------- ReadFile

ReadFileReactor::ReadFileReactor(SandboxManager* sandboxes, const CallAuthenticator* auth,
                                 grpc::CallbackServerContext* ctx, const v1::ReadFileRequest& request) {
  absl::Status status = AuthorizeSandbox(*auth, *sandboxes, *ctx, request.sandbox_id());
  auto sb =
      status.ok() ? sandboxes->Find(request.sandbox_id()) : absl::StatusOr<std::shared_ptr<const Sandbox>>(status);
  auto path = sb.ok() ? (*sb)->ParsePath(request.path()) : absl::StatusOr<SandboxPath>(sb.status());
  auto fd = path.ok() ? OpenRegularForRead((*sb)->home_fd.get(), *path, (*sb)->FileOwner())
                      : absl::StatusOr<UniqueFd>(path.status());
  if (!fd.ok()) {
    Finish(ToGrpcStatus(fd.status()));
    return;
  }
  fd_ = *std::move(fd);
  struct stat st {};
  fstat(fd_.get(), &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  offset_ = std::min<uint64_t>(request.offset(), size);
  end_ = request.length() == 0 ? size : std::min<uint64_t>(size, offset_ + request.length());
  if (request.chunk_size() > 0) chunk_ = std::min<size_t>(request.chunk_size(), kMaxDataChunk);
  ToProto(st, path->normalized, path->components.back(), "", message_.mutable_info());
  WriteNext();
}

void ReadFileReactor::WriteNext() {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk_, end_ - offset_));
  std::string data(want, '\0');
  ssize_t n = want == 0 ? 0 : pread(fd_.get(), data.data(), want, static_cast<off_t>(offset_));
  if (n < 0) {
    Finish(grpc::Status(grpc::StatusCode::INTERNAL, "read failed"));
    return;
  }
  data.resize(static_cast<size_t>(n));
  message_.set_offset(offset_);
  message_.set_data(std::move(data));
  offset_ += static_cast<uint64_t>(n);
  if (n == 0) offset_ = end_;  // the file shrank: stop here
  if (offset_ >= end_) {
    // One operation for the last chunk and the status: StartWriteLast alone may sit corked in the transport
    // until some other event flushes it (seen as a 20 s stall, until the client's keepalive ping).
    StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
    return;
  }
  StartWrite(&message_);
}

void ReadFileReactor::OnWriteDone(bool ok) {
  if (offset_ >= end_) return;  // StartWriteAndFinish: the status went with the last chunk
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    return;
  }
  message_.clear_info();
  WriteNext();
}

}  // namespace corral::sandbox
