#include "services/sandbox_host/images/image_store.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/core/status_macros.h"
#include "libs/core/unique_fd.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr absl::string_view kBlobPrefix = "blobs/sha256/";
constexpr absl::string_view kPartial = ".partial-";

std::string Hex(const std::string& digest) { return digest.substr(digest.find(':') + 1); }

std::string RandomSuffix() {
  unsigned char bytes[8];
  RAND_bytes(bytes, sizeof bytes);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof bytes));
}

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": ", strerror(errno)));
  std::string out(max_bytes + 1, '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  if (out.size() > max_bytes) return absl::InvalidArgumentError(absl::StrCat(path, " is over ", max_bytes, " bytes"));
  return out;
}

// An unpacked layer's size, as EnsureLayer recorded it next to the layer (0 when unknown).
uint64_t LayerBytes(const std::string& layer_dir) {
  auto size = ReadFile(layer_dir + ".size", 64);
  return size.ok() ? std::strtoull(size->c_str(), nullptr, 10) : 0;
}

// Streams the current archive entry into `writer`.
absl::Status WriteArchiveEntry(struct archive* a, BlobWriter& writer) {
  char buf[1 << 16];
  for (;;) {
    const la_ssize_t n = archive_read_data(a, buf, sizeof buf);
    if (n == 0) return writer.Commit();
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("reading a blob: ", archive_error_string(a)));
    CORRAL_RETURN_IF_ERROR(writer.Write(absl::string_view(buf, static_cast<size_t>(n))));
  }
}

}  // namespace

BlobWriter::BlobWriter(std::string digest, std::string path, std::string tmp, UniqueFd fd, int64_t size)
    : digest_(std::move(digest)),
      path_(std::move(path)),
      tmp_(std::move(tmp)),
      fd_(std::move(fd)),
      size_(size),
      sha_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(sha_), EVP_sha256(), nullptr);
}

BlobWriter::~BlobWriter() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(sha_));
  if (!committed_) unlink(tmp_.c_str());
}

absl::Status BlobWriter::Write(absl::string_view piece) {
  bytes_ += piece.size();
  if (size_ >= 0 && bytes_ > static_cast<uint64_t>(size_)) {
    return absl::InvalidArgumentError(absl::StrCat("blob ", digest_, " is longer than its ", size_, " bytes: refused"));
  }
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(sha_), piece.data(), piece.size());
  while (!piece.empty()) {
    const ssize_t n = write(fd_.get(), piece.data(), piece.size());
    if (n <= 0) {
      return errno == ENOSPC ? absl::ResourceExhaustedError("the host's image store is out of disk space")
                             : absl::InternalError(absl::StrCat("writing ", tmp_, ": ", strerror(errno)));
    }
    piece.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status BlobWriter::Commit() {
  unsigned char sum[EVP_MAX_MD_SIZE];
  unsigned int sum_len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(sha_), sum, &sum_len);
  const std::string got =
      absl::StrCat("sha256:", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(sum), sum_len)));
  if (got != digest_)
    return absl::InvalidArgumentError(absl::StrCat("blob ", digest_, " has content ", got, ": refused"));
  if (size_ >= 0 && bytes_ != static_cast<uint64_t>(size_)) {
    return absl::InvalidArgumentError(absl::StrCat("blob ", digest_, " has ", bytes_, " bytes, not ", size_));
  }
  fd_.Reset();
  if (rename(tmp_.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("storing ", path_, ": ", strerror(errno)));
  }
  committed_ = true;
  return absl::OkStatus();
}

ImageStore::ImageStore(std::string dir, LayerLimits layer_limits, Clock* clock, uint64_t max_bytes)
    : dir_(std::move(dir)), layer_limits_(layer_limits), max_bytes_(max_bytes), clock_(clock) {
  std::error_code ec;
  for (const char* sub : {"blobs/sha256", "layers", "images"}) fs::create_directories(fs::path(dir_) / sub, ec);
  Load();
}

std::string ImageStore::BlobPath(const std::string& digest) const {
  return absl::StrCat(dir_, "/blobs/sha256/", Hex(digest));
}
std::string ImageStore::LayerDir(const std::string& digest) const {
  return absl::StrCat(dir_, "/layers/", Hex(digest));
}

absl::StatusOr<std::string> ImageStore::ReadBlob(const std::string& digest, size_t max_bytes) const {
  auto data = ReadFile(BlobPath(digest), max_bytes);
  if (absl::IsNotFound(data.status())) {
    return absl::InvalidArgumentError(absl::StrCat("the image lacks blob ", digest));
  }
  return data;
}

absl::Status ImageStore::ReadArchiveBlobs(int fd, std::string* index_json) {
  std::unique_ptr<struct archive, decltype(&archive_read_free)> a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_fd(a.get(), fd, 1 << 16) != ARCHIVE_OK) {
    return absl::InvalidArgumentError(absl::StrCat("not an oci-archive: ", archive_error_string(a.get())));
  }
  for (;;) {
    struct archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(absl::StrCat("malformed oci-archive: ", archive_error_string(a.get())));
    }
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_pathname(e) == nullptr) continue;
    absl::string_view path = archive_entry_pathname(e);
    absl::ConsumePrefix(&path, "./");
    if (path == "index.json") {
      if (archive_entry_size(e) > static_cast<la_int64_t>(kMaxImageDocumentBytes)) {
        return absl::InvalidArgumentError("the archive's index.json is too large");
      }
      index_json->resize(static_cast<size_t>(archive_entry_size(e)));
      if (archive_read_data(a.get(), index_json->data(), index_json->size()) != archive_entry_size(e)) {
        return absl::InvalidArgumentError("the archive's index.json is truncated");
      }
    } else if (absl::ConsumePrefix(&path, kBlobPrefix)) {
      const std::string digest = absl::StrCat("sha256:", path);
      CORRAL_RETURN_IF_ERROR(ValidateDigest(digest));
      if (HasBlob(digest)) continue;  // content-addressed: already verified when it came
      CORRAL_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> writer, NewBlob(digest, archive_entry_size(e)));
      CORRAL_RETURN_IF_ERROR(WriteArchiveEntry(a.get(), *writer));
    }
  }
  if (index_json->empty()) return absl::InvalidArgumentError("not an oci-archive: no index.json");
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ImageStore::EnsureLayer(const std::string& digest) {
  const std::string dir = LayerDir(digest);
  const std::string size_file = dir + ".size";
  if (fs::is_directory(dir)) return LayerBytes(dir);
  UniqueFd blob(open(BlobPath(digest).c_str(), O_RDONLY | O_CLOEXEC));
  if (blob.get() < 0) return absl::InvalidArgumentError(absl::StrCat("the image lacks layer blob ", digest));
  // Unpacked under a temporary name and renamed: a layer directory is always complete, and two imports racing
  // for one layer keep one copy.
  const std::string tmp = absl::StrCat(dir_, "/layers/", kPartial, RandomSuffix());
  std::error_code ec;
  fs::create_directory(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", tmp, ": ", ec.message()));
  auto stats = UnpackLayer(blob.get(), tmp, layer_limits_);
  if (!stats.ok()) {
    fs::remove_all(tmp, ec);
    return absl::Status(stats.status().code(), absl::StrCat("layer ", digest, ": ", stats.status().message()));
  }
  std::ofstream(size_file) << stats->bytes;
  if (rename(tmp.c_str(), dir.c_str()) != 0) fs::remove_all(tmp, ec);  // another import won the race
  spdlog::info("image layer {} unpacked: {} entries, {} bytes, {} whiteouts", digest, stats->entries, stats->bytes,
               stats->whiteouts);
  return stats->bytes;
}

absl::StatusOr<Image> ImageStore::Resolve(const std::string& index_json, std::string ref) {
  CORRAL_ASSIGN_OR_RETURN(std::vector<Descriptor> manifests, ParseIndex(index_json));
  CORRAL_ASSIGN_OR_RETURN(Descriptor chosen, SelectPlatform(manifests));
  if (IsIndexMediaType(chosen.media_type)) {  // a layout whose index points at a multi-platform index
    CORRAL_ASSIGN_OR_RETURN(std::string nested, ReadBlob(chosen.digest, kMaxImageDocumentBytes));
    CORRAL_ASSIGN_OR_RETURN(manifests, ParseIndex(nested));
    const std::string name = chosen.ref_name;
    CORRAL_ASSIGN_OR_RETURN(chosen, SelectPlatform(manifests));
    if (chosen.ref_name.empty()) chosen.ref_name = name;
  }
  CORRAL_ASSIGN_OR_RETURN(std::string manifest_json, ReadBlob(chosen.digest, kMaxImageDocumentBytes));
  CORRAL_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(manifest_json));
  CORRAL_ASSIGN_OR_RETURN(std::string config_json, ReadBlob(manifest.config.digest, kMaxImageDocumentBytes));
  Image image;
  CORRAL_ASSIGN_OR_RETURN(image.config, ParseImageConfig(config_json));
  if (!image.config.diff_ids.empty() && image.config.diff_ids.size() != manifest.layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the image config lists ", image.config.diff_ids.size(),
                                                   " layers, its manifest ", manifest.layers.size()));
  }
  image.digest = chosen.digest;
  for (const Descriptor& layer : manifest.layers) {
    CORRAL_ASSIGN_OR_RETURN(uint64_t bytes, EnsureLayer(layer.digest));
    image.size_bytes += bytes;
    image.layers.push_back(layer.digest);
  }
  if (ref.empty()) ref = chosen.ref_name;
  if (!ref.empty()) image.refs.push_back(ref);
  image.imported = clock_->Now();
  return image;
}

absl::Status ImageStore::CheckUsable() const { return CheckLayerFilesystem(dir_); }

bool ImageStore::HasBlob(const std::string& digest) const {
  return ValidateDigest(digest).ok() && fs::exists(BlobPath(digest));
}

absl::StatusOr<std::unique_ptr<BlobWriter>> ImageStore::NewBlob(const std::string& digest, int64_t size) const {
  CORRAL_RETURN_IF_ERROR(ValidateDigest(digest));
  const std::string tmp = absl::StrCat(dir_, "/blobs/sha256/", kPartial, RandomSuffix());
  UniqueFd out(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (out.get() < 0) return absl::InternalError(absl::StrCat("creating ", tmp, ": ", strerror(errno)));
  return std::unique_ptr<BlobWriter>(new BlobWriter(digest, BlobPath(digest), tmp, std::move(out), size));
}

absl::StatusOr<std::string> ImageStore::ReadDocument(const std::string& digest) const {
  CORRAL_RETURN_IF_ERROR(ValidateDigest(digest));
  return ReadBlob(digest, kMaxImageDocumentBytes);
}

absl::StatusOr<Image> ImageStore::ImportArchive(int fd, const std::string& ref) {
  CORRAL_RETURN_IF_ERROR(CheckLayerFilesystem(dir_));
  std::string index_json;
  CORRAL_RETURN_IF_ERROR(ReadArchiveBlobs(fd, &index_json));
  return AddImage(index_json, ref);
}

absl::StatusOr<Image> ImageStore::AddImage(const std::string& index_json, const std::string& ref) {
  CORRAL_ASSIGN_OR_RETURN(Image image, Resolve(index_json, ref));
  absl::MutexLock lock(&mu_);
  for (const std::string& name : image.refs) {
    for (auto& [digest, other] : images_) {
      if (digest == image.digest) continue;
      if (std::erase(other.refs, name) > 0) CORRAL_RETURN_IF_ERROR(SaveRecord(other));
    }
  }
  if (auto it = images_.find(image.digest); it != images_.end()) {  // imported before: a new name adds to its own
    std::vector<std::string> refs = it->second.refs;
    for (const std::string& name : image.refs) {
      if (std::find(refs.begin(), refs.end(), name) == refs.end()) refs.push_back(name);
    }
    image.refs = std::move(refs);
  }
  CORRAL_RETURN_IF_ERROR(SaveRecord(image));
  image.last_used = image.imported;
  for (const std::string& layer : image.layers) layer_bytes_[layer] = LayerBytes(LayerDir(layer));
  images_[image.digest] = image;
  EnforceBudgetLocked(image.digest);
  return image;
}

absl::Status ImageStore::SaveRecord(const Image& image) const {
  json::object o;
  json::array refs;
  for (const std::string& r : image.refs) refs.emplace_back(r);
  o["refs"] = std::move(refs);
  o["imported_unix_ms"] = absl::ToUnixMillis(image.imported);
  o["size_bytes"] = image.size_bytes;
  const std::string path = absl::StrCat(dir_, "/images/", Hex(image.digest), ".json");
  const std::string tmp = absl::StrCat(path, kPartial, RandomSuffix());
  {
    std::ofstream out(tmp);
    out << json::serialize(o);
    if (!out.flush()) return absl::InternalError(absl::StrCat("writing ", tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat("storing ", path));
  return absl::OkStatus();
}

void ImageStore::Load() {
  std::error_code ec;
  // What a crash left half-written: temporary blobs, layers and records.
  for (const char* sub : {"blobs/sha256", "layers", "images"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(dir_) / sub, ec)) {
      if (absl::StrContains(entry.path().filename().string(), kPartial)) fs::remove_all(entry.path(), ec);
    }
  }
  absl::MutexLock lock(&mu_);
  for (const auto& entry : fs::directory_iterator(fs::path(dir_) / "images", ec)) {
    if (entry.path().extension() != ".json") continue;
    const std::string digest = absl::StrCat("sha256:", entry.path().stem().string());
    auto record = ReadFile(entry.path().string(), kMaxImageDocumentBytes);
    boost::system::error_code jec;
    json::value v = record.ok() ? json::parse(*record, jec) : json::value();
    auto manifest_json = ReadBlob(digest, kMaxImageDocumentBytes);
    absl::StatusOr<Manifest> manifest = manifest_json.ok() ? ParseManifest(*manifest_json) : manifest_json.status();
    absl::StatusOr<std::string> config_json =
        manifest.ok() ? ReadBlob(manifest->config.digest, kMaxImageDocumentBytes) : manifest.status();
    absl::StatusOr<ImageConfig> config = config_json.ok() ? ParseImageConfig(*config_json) : config_json.status();
    if (jec || !v.is_object() || !config.ok()) {
      spdlog::warn("image store: dropping {} (unreadable: {})", digest,
                   config.ok() ? "record" : config.status().ToString());
      fs::remove(entry.path(), ec);
      continue;
    }
    Image image;
    image.digest = digest;
    image.config = *config;
    for (const Descriptor& layer : manifest->layers) image.layers.push_back(layer.digest);
    const json::object& o = v.as_object();
    if (const json::value* refs = o.if_contains("refs"); refs != nullptr && refs->is_array()) {
      for (const json::value& r : refs->as_array()) {
        if (r.is_string()) image.refs.emplace_back(r.as_string());
      }
    }
    if (const json::value* ms = o.if_contains("imported_unix_ms"); ms != nullptr && ms->is_number()) {
      image.imported = absl::FromUnixMillis(ms->to_number<int64_t>());
    }
    if (const json::value* size = o.if_contains("size_bytes"); size != nullptr && size->is_number()) {
      image.size_bytes = size->to_number<uint64_t>();
    }
    image.last_used = image.imported;
    for (const std::string& layer : image.layers) layer_bytes_[layer] = LayerBytes(LayerDir(layer));
    images_[digest] = std::move(image);
  }
}

absl::StatusOr<UniqueFd> ImageStore::NewImportFile() const {
  UniqueFd fd(open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd.get() < 0) return absl::InternalError(absl::StrCat("a temporary file in ", dir_, ": ", strerror(errno)));
  return fd;
}

const Image* ImageStore::FindLocked(const std::string& ref_or_digest) const {
  if (auto it = images_.find(ref_or_digest); it != images_.end()) return &it->second;
  for (const auto& [digest, image] : images_) {
    if (std::find(image.refs.begin(), image.refs.end(), ref_or_digest) != image.refs.end()) return &image;
  }
  return nullptr;
}

absl::StatusOr<Image> ImageStore::Find(const std::string& ref_or_digest) const {
  absl::ReaderMutexLock lock(&mu_);
  const Image* image = FindLocked(ref_or_digest);
  if (image == nullptr) return absl::NotFoundError(absl::StrCat("no image '", ref_or_digest, "' on this host"));
  return *image;
}

std::vector<Image> ImageStore::List() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<Image> out;
  for (const auto& [digest, image] : images_) out.push_back(image);
  return out;
}

absl::Status ImageStore::Remove(const std::string& ref_or_digest) {
  absl::MutexLock lock(&mu_);
  const Image* found = FindLocked(ref_or_digest);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no image '", ref_or_digest, "' on this host"));
  if (auto pins = pins_.find(found->digest); pins != pins_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("image ", found->digest, " is in use by ", pins->second, " sandbox(es); delete them first"));
  }
  RemoveLocked(*found);
  return absl::OkStatus();
}

uint64_t ImageStore::UsedBytesLocked() const {
  uint64_t total = 0;
  for (const auto& [layer, bytes] : layer_bytes_) total += bytes;
  return total;
}

uint64_t ImageStore::used_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return UsedBytesLocked();
}

void ImageStore::EnforceBudgetLocked(const std::string& keep) {
  while (max_bytes_ > 0 && UsedBytesLocked() > max_bytes_) {
    const Image* oldest = nullptr;
    for (const auto& [digest, image] : images_) {
      if (digest == keep || pins_.count(digest) > 0) continue;
      if (oldest == nullptr || image.last_used < oldest->last_used) oldest = &image;
    }
    if (oldest == nullptr) {
      spdlog::warn("image store: {} bytes of layers, over the budget of {}, and every other image is in use",
                   UsedBytesLocked(), max_bytes_);
      return;
    }
    spdlog::info("image store: removing {} (least recently used) to stay within {} bytes", oldest->digest, max_bytes_);
    RemoveLocked(*oldest);
  }
}

void ImageStore::RemoveLocked(const Image& found) {
  const Image image = found;  // `found` lives in images_
  images_.erase(image.digest);
  std::error_code ec;
  fs::remove(absl::StrCat(dir_, "/images/", Hex(image.digest), ".json"), ec);
  std::set<std::string> still_used;
  for (const auto& [digest, other] : images_) still_used.insert(other.layers.begin(), other.layers.end());
  for (const std::string& layer : image.layers) {
    if (still_used.count(layer) > 0) continue;
    fs::remove_all(LayerDir(layer), ec);
    fs::remove(LayerDir(layer) + ".size", ec);
    layer_bytes_.erase(layer);
    fs::remove(BlobPath(layer), ec);
  }
  if (auto manifest_json = ReadBlob(image.digest, kMaxImageDocumentBytes); manifest_json.ok()) {
    if (auto manifest = ParseManifest(*manifest_json); manifest.ok()) fs::remove(BlobPath(manifest->config.digest), ec);
  }
  fs::remove(BlobPath(image.digest), ec);
}

absl::Status ImageStore::Pin(const std::string& digest) {
  absl::MutexLock lock(&mu_);
  auto it = images_.find(digest);
  if (it == images_.end()) return absl::NotFoundError(absl::StrCat("no image '", digest, "' on this host"));
  it->second.last_used = clock_->Now();
  ++pins_[digest];
  return absl::OkStatus();
}

void ImageStore::Unpin(const std::string& digest) {
  absl::MutexLock lock(&mu_);
  auto it = pins_.find(digest);
  if (it != pins_.end() && --it->second == 0) pins_.erase(it);
}

absl::StatusOr<std::vector<std::string>> ImageStore::LowerDirs(const std::string& digest) const {
  absl::ReaderMutexLock lock(&mu_);
  const Image* image = FindLocked(digest);
  if (image == nullptr) return absl::NotFoundError(absl::StrCat("no image '", digest, "' on this host"));
  std::vector<std::string> out;
  for (auto it = image->layers.rbegin(); it != image->layers.rend(); ++it) out.push_back(LayerDir(*it));
  return out;
}

}  // namespace corral::sandbox
