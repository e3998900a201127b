// CreateUserNamespace + CreateImageRoot for real: a process that joins them runs the image's own shell as root
// inside, its writes land in the upper layer owned by its pool uid outside, and the host's files are out of sight.
#include "services/sandbox_host/image_root.h"
#include "services/sandbox_host/layer_unpack.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "tests/support/uid_range.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Copies `binary` and the libraries it loads (ldd) into `layer` at the same paths.
void CopyWithLibraries(const std::string& binary, const fs::path& layer) {
  std::vector<std::string> files = {fs::canonical(binary).string()};
  FILE* ldd = popen(("ldd " + files[0]).c_str(), "r");
  char line[512];
  while (ldd != nullptr && fgets(line, sizeof line, ldd) != nullptr) {
    std::istringstream in(line);
    std::string word;
    while (in >> word) {
      if (!word.empty() && word[0] == '/') files.push_back(word);
    }
  }
  if (ldd != nullptr) pclose(ldd);
  for (const std::string& f : files) {
    fs::create_directories(layer / fs::path(f).parent_path().relative_path());
    fs::copy_file(f, layer / fs::path(f).relative_path(), fs::copy_options::overwrite_existing);
  }
  fs::create_directories(layer / "bin");
  fs::create_symlink(files[0], layer / "bin/sh");
}

class ImageRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root";
    uids_.emplace(21000, 28999, 2);  // the sandbox unit tests' range (uid_range.h)
    uid_ = static_cast<uid_t>(uids_->first());
    base_ = fs::temp_directory_path() / ("corral-imageroot-" + std::to_string(getpid()));
    for (const char* d : {"base", "top", "sb/upper", "sb/work", "sb/mnt"}) fs::create_directories(base_ / d);
    if (!CheckLayerFilesystem(base_.string()).ok()) GTEST_SKIP() << "the scratch directory is on overlayfs";
    CopyWithLibraries("/bin/sh", base_ / "base");
    fs::create_directories(base_ / "base/etc");
    std::ofstream(base_ / "base/etc/hello") << "from the image\n";
    fs::create_directories(base_ / "top/etc");
    std::ofstream(base_ / "top/etc/motd") << "top layer\n";
    fs::permissions(base_ / "base/etc/hello", fs::perms(0600));  // root's only: readable only as the idmapped root
    chown((base_ / "sb/upper").c_str(), uid_, uid_);
  }
  void TearDown() override {
    if (!base_.empty()) fs::remove_all(base_);
  }

  // Runs `script` with /bin/sh in the image root as root inside; returns its exit status and output.
  std::pair<int, std::string> RunInside(int mnt_fd, int userns_fd, const std::string& script) {
    const std::string out_path = (base_ / "out.txt").string();
    const pid_t pid = fork();
    if (pid == 0) {
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(out, 2);
      if (setns(mnt_fd, CLONE_NEWNS) != 0 || setns(userns_fd, CLONE_NEWUSER) != 0 || setresgid(0, 0, 0) != 0 ||
          setresuid(0, 0, 0) != 0) {
        _exit(99);
      }
      execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      _exit(98);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    std::ifstream in(out_path);
    std::stringstream ss;
    ss << in.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
  }

  std::optional<testing::UidRange> uids_;
  uid_t uid_ = 0;
  fs::path base_;
};

TEST_F(ImageRootTest, TheSandboxIsRootInItsImageAndItsPoolUidOutside) {
  auto userns = CreateUserNamespace(uid_, uid_);
  ASSERT_THAT(userns, IsOk());
  auto root = CreateImageRoot({.lower_dirs = {(base_ / "top").string(), (base_ / "base").string()},
                               .upper_dir = (base_ / "sb/upper").string(),
                               .work_dir = (base_ / "sb/work").string(),
                               .mount_point = (base_ / "sb/mnt").string(),
                               .userns_fd = userns->get(),
                               .uid = uid_,
                               .gid = uid_});
  ASSERT_THAT(root, IsOk());
  auto [code, out] = RunInside(root->mnt.get(), userns->get(), R"(
    while read k v rest; do [ "$k" = "Uid:" ] && echo "uid $v"; done < /proc/self/status
    read line < /etc/hello && echo "hello: $line"
    read line < /etc/motd && echo "motd: $line"
    echo written > /etc/new && echo "wrote /etc/new"
    [ -e /work ] || [ -e /usr/bin/python3 ] || echo "host hidden"
    [ -c /dev/null ] && echo "dev null"
    echo tmp > /tmp/t && echo "tmp ok"
  )");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("uid 0\n"));  // root inside
  EXPECT_THAT(out, HasSubstr("hello: from the image\n"));  // a root-owned 0600 file of the image is its own
  EXPECT_THAT(out, HasSubstr("motd: top layer\n"));
  EXPECT_THAT(out, HasSubstr("wrote /etc/new\n"));
  EXPECT_THAT(out, HasSubstr("host hidden\n"));
  EXPECT_THAT(out, HasSubstr("dev null\n"));
  EXPECT_THAT(out, HasSubstr("tmp ok\n"));
  // Outside, the write is in the sandbox's upper layer, owned by its pool uid; the image's layers are untouched.
  struct stat st {};
  ASSERT_EQ(stat((base_ / "sb/upper/etc/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_);
  EXPECT_FALSE(fs::exists(base_ / "base/etc/new"));
  EXPECT_FALSE(fs::exists(base_ / "top/etc/new"));
  // The host reaches the same files through the root descriptor, /tmp's tmpfs included.
  char buf[64] = {};
  UniqueFd motd(openat(root->root.get(), "etc/motd", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(motd.valid());
  EXPECT_EQ(std::string(buf, read(motd.get(), buf, sizeof buf)), "top layer\n");
  EXPECT_TRUE(UniqueFd(openat(root->root.get(), "tmp/t", O_RDONLY | O_CLOEXEC)).valid());
  EXPECT_FALSE(UniqueFd(openat(root->root.get(), "work", O_RDONLY | O_CLOEXEC)).valid());
}

TEST_F(ImageRootTest, TheProbeFindsIdmappedMountsWhereTheStoreLives) { EXPECT_TRUE(CanUseImages(base_.string())); }

}  // namespace
}  // namespace corral::sandbox
