// Test aid: writes a tar layer entry by entry with libarchive (what a registry serves, and what a hostile layer
// would carry), to a file.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <string>

namespace corral::sandbox {

// Writes a tar (gzip-compressed with `gzip`) entry by entry.
class LayerWriter {
 public:
  LayerWriter(const std::string& path, bool gzip) : a_(archive_write_new()) {
    archive_write_set_format_pax_restricted(a_);
    if (gzip) archive_write_add_filter_gzip(a_);
    archive_write_open_filename(a_, path.c_str());
  }
  ~LayerWriter() { Close(); }
  void Close() {
    if (a_ == nullptr) return;
    archive_write_close(a_);
    archive_write_free(a_);
    a_ = nullptr;
  }

  LayerWriter& File(const std::string& path, const std::string& data, int mode = 0644, int uid = 0) {
    return Add(path, AE_IFREG, mode, uid, data);
  }
  LayerWriter& Dir(const std::string& path, int mode = 0755, int uid = 0) { return Add(path, AE_IFDIR, mode, uid); }
  LayerWriter& Symlink(const std::string& path, const std::string& target) {
    return Add(path, AE_IFLNK, 0777, 0, "", [&](archive_entry* e) { archive_entry_set_symlink(e, target.c_str()); });
  }
  LayerWriter& HardLink(const std::string& path, const std::string& target) {
    return Add(path, AE_IFREG, 0644, 0, "", [&](archive_entry* e) {
      archive_entry_set_hardlink(e, target.c_str());
      archive_entry_set_size(e, 0);
    });
  }
  LayerWriter& Device(const std::string& path) {
    return Add(path, AE_IFCHR, 0666, 0, "", [](archive_entry* e) { archive_entry_set_rdev(e, makedev(1, 3)); });
  }
  LayerWriter& WithXattrs(const std::string& path) {
    return Add(path, AE_IFREG, 0644, 0, "x", [](archive_entry* e) {
      archive_entry_xattr_add_entry(e, "user.kept", "1", 1);
      archive_entry_xattr_add_entry(e, "trusted.overlay.opaque", "y", 1);
      archive_entry_xattr_add_entry(e, "security.capability", "\x01\x00\x00\x02", 4);
    });
  }
  // `size` zero bytes written in chunks (compresses to almost nothing).
  LayerWriter& Zeros(const std::string& path, size_t size) {
    archive_entry* e = Entry(path, AE_IFREG, 0644, 0, size);
    archive_write_header(a_, e);
    const std::string chunk(1 << 20, '\0');
    for (size_t done = 0; done < size; done += chunk.size()) {
      archive_write_data(a_, chunk.data(), std::min(chunk.size(), size - done));
    }
    archive_entry_free(e);
    return *this;
  }

 private:
  archive_entry* Entry(const std::string& path, int type, int mode, int uid, size_t size) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, path.c_str());
    archive_entry_set_filetype(e, static_cast<unsigned>(type));
    archive_entry_set_perm(e, static_cast<mode_t>(mode));
    archive_entry_set_uid(e, uid);
    archive_entry_set_gid(e, uid);
    archive_entry_set_mtime(e, 1'700'000'000, 0);
    archive_entry_set_size(e, static_cast<la_int64_t>(size));
    return e;
  }
  template <typename Fn = void (*)(archive_entry*)>
  LayerWriter& Add(
      const std::string& path, int type, int mode, int uid, const std::string& data = "",
      Fn extra = [](archive_entry*) {}) {
    archive_entry* e = Entry(path, type, mode, uid, data.size());
    extra(e);
    archive_write_header(a_, e);
    if (!data.empty()) archive_write_data(a_, data.data(), data.size());
    archive_entry_free(e);
    return *this;
  }

  struct archive* a_;
};

}  // namespace corral::sandbox
