#include "services/sandbox_host/images/oci_image.h"

#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/json.hpp"
#include "libs/core/status_macros.h"

namespace corral::sandbox {
namespace {

namespace json = boost::json;

absl::StatusOr<json::object> ParseObject(absl::string_view text, absl::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a JSON object", ec ? ": " + ec.message() : ""));
  }
  return std::move(v.as_object());
}

std::string String(const json::object& o, absl::string_view key) {
  const json::value* v = o.if_contains(json::string_view(key.data(), key.size()));
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

std::vector<std::string> Strings(const json::object& o, absl::string_view key) {
  std::vector<std::string> out;
  const json::value* v = o.if_contains(json::string_view(key.data(), key.size()));
  if (v == nullptr || !v->is_array()) return out;
  for (const json::value& item : v->as_array()) {
    if (item.is_string()) out.emplace_back(item.as_string());
  }
  return out;
}

absl::StatusOr<Descriptor> ParseDescriptor(const json::value& v, absl::string_view what) {
  if (!v.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " is not an object"));
  const json::object& o = v.as_object();
  Descriptor d;
  d.media_type = String(o, "mediaType");
  d.digest = String(o, "digest");
  if (absl::Status s = ValidateDigest(d.digest); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (const json::value* size = o.if_contains("size"); size != nullptr && size->is_number()) {
    d.size = size->to_number<int64_t>();
  }
  if (const json::value* p = o.if_contains("platform"); p != nullptr && p->is_object()) {
    const json::object& po = p->as_object();
    d.platform = absl::StrCat(String(po, "os"), "/", String(po, "architecture"));
    if (std::string variant = String(po, "variant"); !variant.empty()) absl::StrAppend(&d.platform, "/", variant);
  }
  if (const json::value* a = o.if_contains("annotations"); a != nullptr && a->is_object()) {
    d.ref_name = String(a->as_object(), "org.opencontainers.image.ref.name");
  }
  return d;
}

bool IsLayerMediaType(absl::string_view t) {
  return t.empty() || absl::StartsWith(t, "application/vnd.oci.image.layer.") ||
         absl::StartsWith(t, "application/vnd.docker.image.rootfs.");
}

}  // namespace

absl::Status ValidateDigest(absl::string_view digest) {
  constexpr absl::string_view kPrefix = "sha256:";
  if (!absl::StartsWith(digest, kPrefix) || digest.size() != kPrefix.size() + 64) {
    return absl::InvalidArgumentError(absl::StrCat("digest '", digest, "' is not sha256:<64 hex digits>"));
  }
  for (char c : digest.substr(kPrefix.size())) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat("digest '", digest, "' is not sha256:<64 lowercase hex digits>"));
    }
  }
  return absl::OkStatus();
}

std::string Sha256Digest(absl::string_view bytes) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
  return absl::StrCat("sha256:",
                      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), sizeof digest)));
}

bool IsIndexMediaType(absl::string_view t) {
  return t == "application/vnd.oci.image.index.v1+json" ||
         t == "application/vnd.docker.distribution.manifest.list.v2+json";
}

absl::StatusOr<std::vector<Descriptor>> ParseIndex(absl::string_view text) {
  CORRAL_ASSIGN_OR_RETURN(json::object o, ParseObject(text, "image index"));
  const json::value* list = o.if_contains("manifests");
  if (list == nullptr || !list->is_array() || list->as_array().empty()) {
    return absl::InvalidArgumentError("image index has no manifests");
  }
  std::vector<Descriptor> out;
  for (const json::value& v : list->as_array()) {
    CORRAL_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor(v, absl::StrCat("manifest ", out.size(), " of the index")));
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<Descriptor> SelectPlatform(const std::vector<Descriptor>& manifests) {
  std::vector<std::string> seen;
  for (const Descriptor& d : manifests) {
    if (d.platform.empty() || d.platform == "linux/amd64" || absl::StartsWith(d.platform, "linux/amd64/")) return d;
    seen.push_back(d.platform);
  }
  return absl::NotFoundError(
      absl::StrCat("the image has no linux/amd64 manifest (it has: ", absl::StrJoin(seen, ", "), ")"));
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view text) {
  CORRAL_ASSIGN_OR_RETURN(json::object o, ParseObject(text, "image manifest"));
  const json::value* config = o.if_contains("config");
  if (config == nullptr) return absl::InvalidArgumentError("image manifest has no config");
  Manifest m;
  CORRAL_ASSIGN_OR_RETURN(m.config, ParseDescriptor(*config, "the manifest's config"));
  if (const json::value* layers = o.if_contains("layers"); layers != nullptr && layers->is_array()) {
    for (const json::value& v : layers->as_array()) {
      CORRAL_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor(v, absl::StrCat("layer ", m.layers.size())));
      if (!IsLayerMediaType(d.media_type)) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", m.layers.size(), " has media type '", d.media_type, "', not a tar layer"));
      }
      m.layers.push_back(std::move(d));
    }
  }
  return m;
}

absl::StatusOr<ImageConfig> ParseImageConfig(absl::string_view text) {
  CORRAL_ASSIGN_OR_RETURN(json::object o, ParseObject(text, "image config"));
  if (std::string os = String(o, "os"); !os.empty() && os != "linux") {
    return absl::InvalidArgumentError(absl::StrCat("image is for '", os, "', not linux"));
  }
  ImageConfig c;
  if (const json::value* v = o.if_contains("config"); v != nullptr && v->is_object()) {
    const json::object& cfg = v->as_object();
    c.env = Strings(cfg, "Env");
    c.working_dir = String(cfg, "WorkingDir");
    c.user = String(cfg, "User");
    c.entrypoint = Strings(cfg, "Entrypoint");
    c.cmd = Strings(cfg, "Cmd");
  }
  if (const json::value* v = o.if_contains("rootfs"); v != nullptr && v->is_object()) {
    c.diff_ids = Strings(v->as_object(), "diff_ids");
  }
  return c;
}

}  // namespace corral::sandbox
