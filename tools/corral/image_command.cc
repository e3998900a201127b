// `corral image pull|import|ls|rm`: OCI images on a corral-sandbox-host, from the shell.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "corral/v1/sandbox.grpc.pb.h"
#include "libs/core/unique_fd.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/connect_flags.h"
#include "tools/corral/sandbox_client.h"

namespace corral::cli {
namespace {

constexpr size_t kChunk = 1 << 20;

std::string Short(const std::string& digest) { return digest.substr(0, std::min<size_t>(digest.size(), 19)); }

int RunImport(const ConnectFlags& cf, const std::string& path, const std::string& ref) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0) {
    std::cerr << "corral image import: " << path << ": " << strerror(errno) << "\n";
    return 1;
  }
  auto client = Connect(cf);
  if (!client.ok()) return Fail("image import", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(std::max(cf.timeout_s, 600.0)));  // unpacking a large image takes a while
  v1::Image image;
  auto writer = client->stub->ImportImage(&ctx, &image);
  v1::ImportImageRequest req;
  req.mutable_header()->set_ref(ref);
  req.mutable_header()->set_size(static_cast<uint64_t>(st.st_size));
  bool sent = writer->Write(req);
  std::string chunk(kChunk, '\0');
  uint64_t done = 0;
  while (sent) {
    const ssize_t n = read(fd.get(), chunk.data(), chunk.size());
    if (n <= 0) break;
    req.set_data(chunk.data(), static_cast<size_t>(n));
    sent = writer->Write(req);
    done += static_cast<uint64_t>(n);
    if (isatty(2)) std::cerr << absl::StrFormat("\rsent %d / %d MiB", done >> 20, st.st_size >> 20);
  }
  if (isatty(2)) std::cerr << "\n";
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (!s.ok()) return Fail("image import", FromGrpcStatus(s));
  std::cout << image.digest() << " " << absl::StrJoin(image.refs(), ",") << " (" << image.layers_size() << " layers, "
            << (image.size_bytes() >> 20) << " MiB unpacked)\n";
  return 0;
}

int RunPull(const ConnectFlags& cf, const std::string& ref) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("image pull", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(std::max(cf.timeout_s, 3600.0)));  // a large image over a slow link
  v1::PullImageRequest req;
  req.set_ref(ref);
  auto reader = client->stub->PullImage(&ctx, req);
  v1::PullImageProgress progress;
  v1::Image image;
  const bool tty = isatty(2);
  while (reader->Read(&progress)) {
    if (progress.has_image()) image = progress.image();
    if (!tty || progress.has_image()) continue;
    const uint64_t total = progress.total_bytes();
    std::cerr << absl::StrFormat("\r\033[K%-30.30s %6.1f / %.1f MiB", progress.step(),
                                 progress.done_bytes() / 1048576.0, total / 1048576.0);
  }
  if (tty) std::cerr << "\r\033[K";
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail("image pull", FromGrpcStatus(s));
  std::cout << image.digest() << " " << absl::StrJoin(image.refs(), ",") << " (" << image.layers_size() << " layers, "
            << (image.size_bytes() >> 20) << " MiB unpacked)\n";
  return 0;
}

int RunImageList(const ConnectFlags& cf) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("image ls", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(cf.timeout_s));
  v1::ListImagesResponse resp;
  grpc::Status s = client->stub->ListImages(&ctx, v1::ListImagesRequest(), &resp);
  if (!s.ok()) return Fail("image ls", FromGrpcStatus(s));
  std::cout << absl::StrFormat("%-19s %6s %10s  %s\n", "DIGEST", "LAYERS", "SIZE", "NAMES");
  for (const v1::Image& image : resp.images()) {
    std::cout << absl::StrFormat("%-19s %6d %8d M  %s\n", Short(image.digest()), image.layers_size(),
                                 image.size_bytes() >> 20, absl::StrJoin(image.refs(), ","));
  }
  return 0;
}

int RunImageRemove(const ConnectFlags& cf, const std::string& image) {
  auto client = Connect(cf);
  if (!client.ok()) return Fail("image rm", client.status());
  grpc::ClientContext ctx;
  client->Prepare(ctx, absl::Seconds(std::max(cf.timeout_s, 60.0)));
  v1::DeleteImageRequest req;
  req.set_image(image);
  v1::DeleteImageResponse resp;
  grpc::Status s = client->stub->DeleteImage(&ctx, req, &resp);
  if (!s.ok()) return Fail("image rm", FromGrpcStatus(s));
  return 0;
}

}  // namespace

void RegisterImage(CLI::App& app, int& exit_code) {
  CLI::App* image = app.add_subcommand("image", "OCI images on a corral-sandbox-host (pull, import, list, remove)");
  image->require_subcommand(1);

  auto import_conn = std::make_shared<ConnectFlags>();
  auto import_args = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* i = image->add_subcommand(
      "import", "send an oci-archive (podman save --format oci-archive) to the host; prints its digest and names");
  AddConnectFlags(i, *import_conn, "sandbox host", "--host");
  i->add_option("archive", import_args->first, "the oci-archive file")->required();
  i->add_option("--ref", import_args->second, "the name to give it (default: the archive's own ref name)");
  i->callback([import_conn, import_args, &exit_code] {
    exit_code = RunImport(*import_conn, import_args->first, import_args->second);
  });

  auto pull_conn = std::make_shared<ConnectFlags>();
  auto pull_ref = std::make_shared<std::string>();
  CLI::App* p = image->add_subcommand(
      "pull",
      "have the host pull an image from a registry (its registry_* settings apply); prints its digest and names");
  AddConnectFlags(p, *pull_conn, "sandbox host", "--host");
  p->add_option("ref", *pull_ref, "[registry/]repository[:tag][@sha256:…]")->required();
  p->callback([pull_conn, pull_ref, &exit_code] { exit_code = RunPull(*pull_conn, *pull_ref); });

  auto ls_conn = std::make_shared<ConnectFlags>();
  CLI::App* ls = image->add_subcommand("ls", "list the host's images");
  AddConnectFlags(ls, *ls_conn, "sandbox host", "--host");
  ls->callback([ls_conn, &exit_code] { exit_code = RunImageList(*ls_conn); });

  auto rm_conn = std::make_shared<ConnectFlags>();
  auto rm_image = std::make_shared<std::string>();
  CLI::App* rm = image->add_subcommand("rm", "remove an image (and the layers no other image uses)");
  AddConnectFlags(rm, *rm_conn, "sandbox host", "--host");
  rm->add_option("image", *rm_image, "a name or digest")->required();
  rm->callback([rm_conn, rm_image, &exit_code] { exit_code = RunImageRemove(*rm_conn, *rm_image); });
}

}  // namespace corral::cli
