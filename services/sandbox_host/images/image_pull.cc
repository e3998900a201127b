#include "services/sandbox_host/images/image_pull.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/images/oci_image.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

namespace json = boost::json;
constexpr uint64_t kMaxBlobBytes = uint64_t{64} << 30;  // a layer; the store's own layer limits apply on unpack

const std::vector<std::string>& ManifestTypes() {
  static const std::vector<std::string> types = {"application/vnd.oci.image.index.v1+json",
                                                 "application/vnd.oci.image.manifest.v1+json",
                                                 "application/vnd.docker.distribution.manifest.list.v2+json",
                                                 "application/vnd.docker.distribution.manifest.v2+json"};
  return types;
}

// The document's mediaType field, else the Content-Type it came with.
std::string MediaType(const std::string& body, const std::string& content_type) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* t = v.as_object().if_contains("mediaType"); t != nullptr && t->is_string()) {
      return std::string(t->as_string());
    }
  }
  return std::string(absl::StripAsciiWhitespace(std::vector<absl::string_view>(absl::StrSplit(content_type, ';'))[0]));
}

}  // namespace

absl::StatusOr<Image> ImagePuller::Pull(const std::string& text,
                                        const std::function<void(const PullProgress&)>& progress) {
  CORRAL_ASSIGN_OR_RETURN(ImageReference ref, ParseImageReference(text));
  std::shared_ptr<Name> name;
  {
    absl::MutexLock lock(&mu_);
    auto& slot = names_[ref.ToString()];
    if (slot == nullptr) slot = std::make_shared<Name>();
    name = slot;
  }
  const uint64_t successes_asked = name->successes.load();
  absl::MutexLock pulling(&name->pulling);
  if (name->successes.load() > successes_asked) {  // pulled while this call waited for that pull
    if (auto image = store_->Find(ref.ToString()); image.ok()) return image;
  }
  auto image = PullLocked(ref, progress);
  if (image.ok()) ++name->successes;
  return image;
}

absl::StatusOr<Image> ImagePuller::PullLocked(const ImageReference& ref,
                                              const std::function<void(const PullProgress&)>& progress) {
  PullProgress state;
  auto report = [&](std::string step) {
    state.step = std::move(step);
    if (progress) progress(state);
  };
  CORRAL_RETURN_IF_ERROR(store_->CheckUsable());
  const std::string name = ref.ToString();

  // A manifest (or index): fetched whole, checked against the digest asked for or announced, stored.
  auto fetch_document = [&](const std::string& reference,
                            const std::string& expected) -> absl::StatusOr<std::pair<std::string, std::string>> {
    std::string body;
    CORRAL_ASSIGN_OR_RETURN(RegistryResponse response, client_.Get(
                                                           ref, "manifests", reference, ManifestTypes(),
                                                           [&](absl::string_view piece) {
                                                             body.append(piece.data(), piece.size());
                                                             return absl::OkStatus();
                                                           },
                                                           kMaxImageDocumentBytes));
    const std::string digest = Sha256Digest(body);
    if (!expected.empty() && digest != expected) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the registry sent a manifest whose content is ", digest,
                                                     ", not the ", expected, " asked for: refused"));
    }
    if (!response.docker_content_digest.empty() && response.docker_content_digest != digest) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the registry announced manifest ",
                                                     response.docker_content_digest, " but sent content ", digest,
                                                     ": refused"));
    }
    if (!store_->HasBlob(digest)) {
      CORRAL_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> writer, store_->NewBlob(digest, -1));
      CORRAL_RETURN_IF_ERROR(writer->Write(body));
      CORRAL_RETURN_IF_ERROR(writer->Commit());
    }
    return std::make_pair(digest, MediaType(body, response.content_type));
  };

  report("manifest");
  CORRAL_ASSIGN_OR_RETURN(auto top, fetch_document(ref.digest.empty() ? ref.tag : ref.digest, ref.digest));
  auto [top_digest, top_type] = top;
  std::string manifest_digest = top_digest;
  if (IsIndexMediaType(top_type)) {
    CORRAL_ASSIGN_OR_RETURN(std::string index_json, store_->ReadDocument(top_digest));
    CORRAL_ASSIGN_OR_RETURN(std::vector<Descriptor> manifests, ParseIndex(index_json));
    CORRAL_ASSIGN_OR_RETURN(Descriptor chosen, SelectPlatform(manifests));
    CORRAL_ASSIGN_OR_RETURN(auto platform_manifest, fetch_document(chosen.digest, chosen.digest));
    manifest_digest = platform_manifest.first;
  }
  CORRAL_ASSIGN_OR_RETURN(std::string manifest_json, store_->ReadDocument(manifest_digest));
  CORRAL_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(manifest_json));

  std::vector<std::pair<Descriptor, std::string>> wanted;  // with the step name
  if (!store_->HasBlob(manifest.config.digest)) wanted.emplace_back(manifest.config, "config");
  for (const Descriptor& layer : manifest.layers) {
    if (!store_->HasBlob(layer.digest)) wanted.emplace_back(layer, absl::StrCat("layer ", layer.digest));
  }
  for (const auto& [d, step] : wanted) state.total_bytes += static_cast<uint64_t>(std::max<int64_t>(0, d.size));
  for (const auto& [d, step] : wanted) {
    report(step);
    CORRAL_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> writer, store_->NewBlob(d.digest, d.size > 0 ? d.size : -1));
    const uint64_t before = state.done_bytes;
    auto sink = [&](absl::string_view piece) {
      absl::Status written = writer->Write(piece);
      state.done_bytes = before + writer->bytes();
      if (progress) progress(state);
      return written;
    };
    CORRAL_RETURN_IF_ERROR(client_.Get(ref, "blobs", d.digest, {}, sink, kMaxBlobBytes).status());
    CORRAL_RETURN_IF_ERROR(writer->Commit());
  }
  report("unpacking");
  json::object entry;
  entry["mediaType"] = top_type;
  entry["digest"] = top_digest;
  json::object index;
  index["schemaVersion"] = 2;
  index["manifests"] = json::array{entry};
  CORRAL_ASSIGN_OR_RETURN(Image image, store_->AddImage(json::serialize(index), name));
  spdlog::info("image {} pulled: {} ({} layers, {} bytes fetched)", name, image.digest, image.layers.size(),
               state.done_bytes);
  return image;
}

}  // namespace corral::sandbox
