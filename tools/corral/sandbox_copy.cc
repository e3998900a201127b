// `corral sandbox cp SRC DST`, docker-cp style: `ID:PATH` names a path in a sandbox, anything else a local path.
// Files and directories (recursively) in either direction; copying onto an existing directory copies into it.
// Symlinks are recreated as links; FIFOs, sockets and devices are skipped.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "libs/core/status_macros.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/sandbox_client.h"

namespace corral::cli {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kFileTimeout = absl::Minutes(10);

struct Totals {
  uint64_t files = 0;
  uint64_t bytes = 0;
};

bool SplitRemote(const std::string& arg, std::string* id, std::string* path) {
  size_t colon = arg.find(':');
  if (colon == std::string::npos || arg.rfind("sb-", 0) != 0) return false;
  *id = arg.substr(0, colon);
  *path = arg.substr(colon + 1);
  return true;
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir == "." ? name : (dir.back() == '/' ? dir + name : dir + "/" + name);
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// NOT_FOUND when the path does not exist.
absl::StatusOr<v1::FileInfo> RemoteStat(const Client& c, const std::string& id, const std::string& path) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, absl::Seconds(c.timeout_s));
  v1::StatRequest req;
  req.set_sandbox_id(id);
  req.set_path(path);
  v1::FileInfo info;
  CORRAL_RETURN_IF_ERROR(FromGrpcStatus(c.stub->Stat(&ctx, req, &info)));
  return info;
}

absl::Status RemoteMkdir(const Client& c, const std::string& id, const std::string& path) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, absl::Seconds(c.timeout_s));
  v1::MakeDirRequest req;
  req.set_sandbox_id(id);
  req.set_path(path);
  req.set_make_parents(true);
  v1::FileInfo info;
  return FromGrpcStatus(c.stub->MakeDir(&ctx, req, &info));
}

absl::StatusOr<std::vector<v1::FileInfo>> RemoteList(const Client& c, const std::string& id, const std::string& path) {
  std::vector<v1::FileInfo> all;
  std::string token;
  do {
    grpc::ClientContext ctx;
    c.Prepare(ctx, absl::Seconds(c.timeout_s));
    v1::ListDirRequest req;
    req.set_sandbox_id(id);
    req.set_path(path);
    req.set_page_size(1000);
    req.set_page_token(token);
    v1::ListDirResponse resp;
    CORRAL_RETURN_IF_ERROR(FromGrpcStatus(c.stub->ListDir(&ctx, req, &resp)));
    all.insert(all.end(), resp.entries().begin(), resp.entries().end());
    token = resp.next_page_token();
  } while (!token.empty());
  return all;
}

absl::Status UploadFile(const Client& c, const std::string& local, const std::string& id, const std::string& path,
                        Totals& totals) {
  FILE* in = fopen(local.c_str(), "rb");
  if (in == nullptr) return absl::NotFoundError("cannot read " + local);
  struct stat st {};
  fstat(fileno(in), &st);
  grpc::ClientContext ctx;
  c.Prepare(ctx, kFileTimeout);
  v1::FileInfo info;
  auto writer = c.stub->WriteFile(&ctx, &info);
  v1::WriteFileRequest header;
  header.mutable_header()->set_sandbox_id(id);
  header.mutable_header()->set_path(path);
  header.mutable_header()->set_make_parents(true);
  header.mutable_header()->set_permissions(st.st_mode & 0777);
  bool ok = writer->Write(header);
  std::string buf(1 << 20, '\0');
  size_t n;
  while (ok && (n = fread(buf.data(), 1, buf.size(), in)) > 0) {
    v1::WriteFileRequest chunk;
    chunk.set_data(buf.data(), n);
    ok = writer->Write(chunk);
  }
  fclose(in);
  writer->WritesDone();
  CORRAL_RETURN_IF_ERROR(FromGrpcStatus(writer->Finish()));
  totals.files++;
  totals.bytes += info.size();
  return absl::OkStatus();
}

absl::Status DownloadFile(const Client& c, const std::string& id, const std::string& path, const std::string& local,
                          Totals& totals) {
  grpc::ClientContext ctx;
  c.Prepare(ctx, kFileTimeout);
  v1::ReadFileRequest req;
  req.set_sandbox_id(id);
  req.set_path(path);
  auto reader = c.stub->ReadFile(&ctx, req);
  FILE* out = fopen(local.c_str(), "wb");
  if (out == nullptr) return absl::FailedPreconditionError("cannot write " + local);
  v1::ReadFileResponse chunk;
  uint64_t bytes = 0;
  uint32_t mode = 0644;
  while (reader->Read(&chunk)) {
    if (chunk.has_info()) mode = chunk.info().permissions();
    fwrite(chunk.data().data(), 1, chunk.data().size(), out);
    bytes += chunk.data().size();
  }
  fchmod(fileno(out), mode & 0777);
  fclose(out);
  if (absl::Status s = FromGrpcStatus(reader->Finish()); !s.ok()) {
    std::remove(local.c_str());
    return s;
  }
  totals.files++;
  totals.bytes += bytes;
  return absl::OkStatus();
}

absl::Status UploadTree(const Client& c, const std::string& local, const std::string& id, const std::string& path,
                        Totals& totals) {
  CORRAL_RETURN_IF_ERROR(RemoteMkdir(c, id, path));
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(local, ec)) {
    const std::string name = e.path().filename().string();
    const fs::file_status st = e.symlink_status();
    if (fs::is_directory(st)) {
      CORRAL_RETURN_IF_ERROR(UploadTree(c, e.path().string(), id, Join(path, name), totals));
    } else if (fs::is_regular_file(st)) {
      CORRAL_RETURN_IF_ERROR(UploadFile(c, e.path().string(), id, Join(path, name), totals));
    } else {
      std::cerr << "skipped " << e.path().string() << " (not a regular file or directory)\n";
    }
  }
  if (ec) return absl::FailedPreconditionError("cannot list " + local + ": " + ec.message());
  return absl::OkStatus();
}

absl::Status DownloadTree(const Client& c, const std::string& id, const std::string& path, const std::string& local,
                          Totals& totals) {
  std::error_code ec;
  fs::create_directories(local, ec);
  if (ec) return absl::FailedPreconditionError("cannot create " + local + ": " + ec.message());
  CORRAL_ASSIGN_OR_RETURN(std::vector<v1::FileInfo> entries, RemoteList(c, id, path));
  for (const v1::FileInfo& e : entries) {
    const std::string to = Join(local, e.name());
    switch (e.type()) {
      case v1::FILE_TYPE_DIRECTORY: CORRAL_RETURN_IF_ERROR(DownloadTree(c, id, e.path(), to, totals)); break;
      case v1::FILE_TYPE_REGULAR: CORRAL_RETURN_IF_ERROR(DownloadFile(c, id, e.path(), to, totals)); break;
      case v1::FILE_TYPE_SYMLINK:
        fs::create_symlink(e.link_target(), to, ec);  // a link, as in the sandbox; never followed here
        if (ec) return absl::FailedPreconditionError("cannot create link " + to + ": " + ec.message());
        break;
      default: std::cerr << "skipped " << e.path() << " (not a regular file, directory or link)\n";
    }
  }
  return absl::OkStatus();
}

absl::Status Copy(const Client& c, const std::string& src, const std::string& dst, Totals& totals) {
  std::string id, path;
  if (SplitRemote(src, &id, &path)) {  // download
    std::string other_id, other_path;
    if (SplitRemote(dst, &other_id, &other_path)) {
      return absl::InvalidArgumentError("copy between sandboxes is not supported");
    }
    CORRAL_ASSIGN_OR_RETURN(v1::FileInfo info, RemoteStat(c, id, path));
    const std::string to = fs::is_directory(dst) ? Join(dst, BaseName(info.path().empty() ? id : info.path())) : dst;
    if (info.type() == v1::FILE_TYPE_DIRECTORY) return DownloadTree(c, id, path, to, totals);
    return DownloadFile(c, id, path, to, totals);
  }
  if (!SplitRemote(dst, &id, &path)) {
    return absl::InvalidArgumentError("one side must be ID:PATH (a path in a sandbox)");
  }
  std::error_code ec;
  const fs::file_status st = fs::status(src, ec);
  if (ec || !fs::exists(st)) return absl::NotFoundError("cannot read " + src);
  auto existing = RemoteStat(c, id, path);
  const bool into = existing.ok() && existing->type() == v1::FILE_TYPE_DIRECTORY;
  const std::string to = into ? Join(path, BaseName(src)) : path;
  if (fs::is_directory(st)) return UploadTree(c, src, id, to, totals);
  return UploadFile(c, src, id, to, totals);
}

}  // namespace

int RunCopy(const ConnectFlags& flags, const std::string& src, const std::string& dst) {
  auto client = Connect(flags);
  if (!client.ok()) return Fail("sandbox cp", client.status());
  Totals totals;
  if (absl::Status s = Copy(*client, src, dst, totals); !s.ok()) return Fail("sandbox cp", s);
  std::cerr << totals.files << (totals.files == 1 ? " file, " : " files, ") << totals.bytes << " bytes copied\n";
  return 0;
}

}  // namespace corral::cli
