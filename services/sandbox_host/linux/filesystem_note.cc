#include "services/sandbox_host/linux/filesystem_note.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace corral::sandbox {
namespace {

constexpr long kExt4Magic = 0xEF53;  // EXT4_SUPER_MAGIC (ext2 and ext3 share it)

}  // namespace

bool Ext4WithoutJournal(dev_t dev, const std::string& sysfs) {
  char target[256];
  const std::string link = absl::StrCat(sysfs, "/dev/block/", major(dev), ":", minor(dev));
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return false;
  absl::string_view device(target, static_cast<size_t>(n));
  if (const size_t slash = device.rfind('/'); slash != absl::string_view::npos) device.remove_prefix(slash + 1);
  std::ifstream in(absl::StrCat(sysfs, "/fs/ext4/", device, "/journal_task"));
  std::string task;
  return std::getline(in, task) && absl::StripAsciiWhitespace(task) == "<none>";
}

std::string SlowFilesystemNote(const std::string& dir) {
  struct statfs fs {};
  struct stat st {};
  if (statfs(dir.c_str(), &fs) != 0 || fs.f_type != kExt4Magic || stat(dir.c_str(), &st) != 0) return "";
  if (!Ext4WithoutJournal(st.st_dev)) return "";
  return absl::StrCat(dir,
                      " is on ext4 without a journal, which skips every inode freed in the last minute when it "
                      "makes a file: sandboxes' creates, forks and deletes slow down as the host churns (2-3x "
                      "measured). A journalled ext4 or xfs does not do this");
}

}  // namespace corral::sandbox
