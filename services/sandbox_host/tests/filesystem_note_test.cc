#include "services/sandbox_host/linux/filesystem_note.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;

// A sysfs of its own: /dev/block/M:m links to the device's directory, /fs/ext4/NAME/journal_task says its journal.
class FilesystemNoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sysfs_ = fs::path(::testing::TempDir()) / absl::StrCat("corral-sysfs-", getpid());
    fs::remove_all(sysfs_);
    fs::create_directories(sysfs_ / "dev/block");
  }
  void TearDown() override { fs::remove_all(sysfs_); }

  // Device `dev` is `path` (below /devices) with `journal_task` in its ext4 directory, if any.
  void Device(dev_t dev, const std::string& path, const char* journal_task) {
    const std::string name = fs::path(path).filename();
    fs::create_directories(sysfs_ / "devices" / path);
    fs::create_symlink(absl::StrCat("../../devices/", path),
                       sysfs_ / "dev/block" / absl::StrCat(major(dev), ":", minor(dev)));
    if (journal_task == nullptr) return;
    fs::create_directories(sysfs_ / "fs/ext4" / name);
    std::ofstream(sysfs_ / "fs/ext4" / name / "journal_task") << journal_task;
  }

  fs::path sysfs_;
};

TEST_F(FilesystemNoteTest, AnExt4WithoutAJournalIsNamed) {
  Device(makedev(254, 0), "virtual/block/vda", "<none>\n");
  EXPECT_TRUE(Ext4WithoutJournal(makedev(254, 0), sysfs_));
}

TEST_F(FilesystemNoteTest, APartitionIsFoundByItsOwnName) {
  Device(makedev(8, 1), "pci0000:00/block/sda/sda1", "<none>\n");
  Device(makedev(8, 2), "pci0000:00/block/sda/sda2", "412\n");
  EXPECT_TRUE(Ext4WithoutJournal(makedev(8, 1), sysfs_));
  EXPECT_FALSE(Ext4WithoutJournal(makedev(8, 2), sysfs_));
}

TEST_F(FilesystemNoteTest, AJournalledOrUnknownFilesystemIsNot) {
  Device(makedev(7, 0), "virtual/block/loop0", "30041\n");    // its journal thread's pid
  Device(makedev(259, 0), "virtual/block/nvme0n1", nullptr);  // not ext4: no directory of its own
  EXPECT_FALSE(Ext4WithoutJournal(makedev(7, 0), sysfs_));
  EXPECT_FALSE(Ext4WithoutJournal(makedev(259, 0), sysfs_));
  EXPECT_FALSE(Ext4WithoutJournal(makedev(1, 99), sysfs_));  // no such device
}

TEST_F(FilesystemNoteTest, OnlyExt4IsLookedAt) {
  EXPECT_EQ(SlowFilesystemNote("/proc"), "");
  EXPECT_EQ(SlowFilesystemNote("/no/such/dir"), "");
}

TEST_F(FilesystemNoteTest, TheNoteOfThisMachineMatchesItsSysfs) {
  // Whatever /var/tmp is here, the note says so exactly when sysfs says it has no journal.
  struct stat st {};
  ASSERT_EQ(stat("/var/tmp", &st), 0);
  const std::string note = SlowFilesystemNote("/var/tmp");
  EXPECT_EQ(!note.empty(), Ext4WithoutJournal(st.st_dev));
  if (!note.empty()) {
    EXPECT_NE(note.find("/var/tmp is on ext4 without a journal"), std::string::npos);
  }
}

}  // namespace
}  // namespace corral::sandbox
