#include "services/sandbox_host/linux/sandbox_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kTaskPaths = {"/workspace", "/logs"};

TEST(ParseSandboxPath, RelativeTaskAndTmpPathsMapIntoTheHome) {
  auto p = ParseSandboxPath("src/./main.py", kTaskPaths);
  ASSERT_THAT(p, IsOk());
  EXPECT_THAT(p->components, ElementsAre("src", "main.py"));
  EXPECT_EQ(p->normalized, "src/main.py");
  auto w = ParseSandboxPath("/workspace/a//b.txt", kTaskPaths);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->components, ElementsAre("workspace", "a", "b.txt"));
  EXPECT_EQ(w->normalized, "/workspace/a/b.txt");
  auto t = ParseSandboxPath("/tmp/x", kTaskPaths);
  ASSERT_THAT(t, IsOk());
  EXPECT_THAT(t->components, ElementsAre(".tmp", "x"));
  EXPECT_THAT(ParseSandboxPath("", kTaskPaths, /*allow_home=*/true), IsOk());
}

TEST(ParseSandboxPath, RejectsEscapes) {
  EXPECT_THAT(ParseSandboxPath("../other/home", kTaskPaths),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("..")));
  EXPECT_THAT(ParseSandboxPath("a/../../b", kTaskPaths), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSandboxPath("/etc/shadow", kTaskPaths),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the sandbox")));
  EXPECT_THAT(ParseSandboxPath("/workspacex/a", kTaskPaths), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSandboxPath(std::string("a\0b", 3), kTaskPaths),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NUL")));
  EXPECT_THAT(ParseSandboxPath(std::string(5000, 'a'), kTaskPaths), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSandboxPath(".", kTaskPaths), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("home")));
}

// A real home directory with attack fixtures: symlinks out, a FIFO, a file owned by someone else.
class WalkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("walker-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "home" / "dir");
    fs::create_directories(root_ / "outside");
    std::ofstream(root_ / "outside" / "secret") << "host secret";
    std::ofstream(root_ / "home" / "dir" / "mine.txt") << "hello";
    chown((root_ / "home" / "dir" / "mine.txt").c_str(), owner_.uid, owner_.gid);
    std::ofstream(root_ / "home" / "rootfile") << "planted";
    fs::create_symlink(root_ / "outside" / "secret", root_ / "home" / "link_file");
    fs::create_directory_symlink(root_ / "outside", root_ / "home" / "link_dir");
    mkfifo((root_ / "home" / "fifo").c_str(), 0666);
    chown((root_ / "home" / "fifo").c_str(), owner_.uid, owner_.gid);
    home_.Reset(open((root_ / "home").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(home_.valid());
  }
  void TearDown() override { fs::remove_all(root_); }

  SandboxPath P(const std::string& path) { return *ParseSandboxPath(path, kTaskPaths); }
  std::string Read(const std::string& path) {
    auto fd = OpenRegularForRead(home_.get(), P(path), owner_);
    if (!fd.ok()) return "error: " + fd.status().ToString();
    char buf[256];
    ssize_t n = read(fd->get(), buf, sizeof(buf));
    return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }

  fs::path root_;
  UniqueFd home_;
  Owner owner_{20001, 20001};
};

TEST_F(WalkerTest, ReadsTheSandboxsOwnRegularFile) { EXPECT_EQ(Read("dir/mine.txt"), "hello"); }

TEST_F(WalkerTest, FinalAndIntermediateSymlinksAreRefusedNotFollowed) {
  EXPECT_THAT(OpenRegularForRead(home_.get(), P("link_file"), owner_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("symlink")));
  EXPECT_THAT(OpenRegularForRead(home_.get(), P("link_dir/secret"), owner_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("symlink")));
  EXPECT_THAT(FileWriter::Open(home_.get(), P("link_dir/new"), WriteMode::kReplace, 0644, owner_, false),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(Read("link_file").rfind("error", 0), 0u);
}

TEST_F(WalkerTest, FifosAndFilesOfOthersAreRefusedWithoutBlocking) {
  EXPECT_THAT(OpenRegularForRead(home_.get(), P("fifo"), owner_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a regular file")));
  EXPECT_THAT(OpenRegularForRead(home_.get(), P("rootfile"), owner_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("does not belong")));
  EXPECT_THAT(OpenRegularForRead(home_.get(), P("dir"), owner_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("directory")));
  EXPECT_THAT(OpenRegularForRead(home_.get(), P("missing"), owner_), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(FileWriter::Open(home_.get(), P("fifo"), WriteMode::kAppend, 0644, owner_, false),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(WalkerTest, ReplaceIsAtomicOwnedBySandboxAndReplacesASymlinkItself) {
  auto w = FileWriter::Open(home_.get(), P("link_file"), WriteMode::kReplace, 0600, owner_, false);
  ASSERT_THAT(w, IsOk());
  ASSERT_THAT(w->Write("new content"), IsOk());
  EXPECT_TRUE(fs::is_symlink(root_ / "home" / "link_file"));  // nothing visible before Commit
  ASSERT_THAT(w->Commit(), IsOk());
  EXPECT_FALSE(fs::is_symlink(root_ / "home" / "link_file"));
  EXPECT_EQ(Read("link_file"), "new content");
  std::ifstream secret(root_ / "outside" / "secret");
  std::string untouched((std::istreambuf_iterator<char>(secret)), std::istreambuf_iterator<char>());
  EXPECT_EQ(untouched, "host secret");
  struct stat st {};
  ASSERT_EQ(stat((root_ / "home" / "link_file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner_.uid);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(WalkerTest, AbandonedWriterLeavesNothingAndCreateRefusesExisting) {
  {
    auto w = FileWriter::Open(home_.get(), P("draft.txt"), WriteMode::kReplace, 0644, owner_, false);
    ASSERT_THAT(w, IsOk());
    ASSERT_THAT(w->Write("partial"), IsOk());
  }
  EXPECT_FALSE(fs::exists(root_ / "home" / "draft.txt"));
  for (const auto& entry : fs::directory_iterator(root_ / "home")) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(::testing::StartsWith(".corral-write-")));
  }
  EXPECT_THAT(FileWriter::Open(home_.get(), P("dir/mine.txt"), WriteMode::kCreate, 0644, owner_, false),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(FileWriter::Open(home_.get(), P("dir"), WriteMode::kReplace, 0644, owner_, false),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("directory")));
}

TEST_F(WalkerTest, MakeParentsCreatesOwnedDirectoriesAndAppendAppends) {
  auto w = FileWriter::Open(home_.get(), P("/workspace/deep/er/log.txt"), WriteMode::kAppend, 0644, owner_, true);
  ASSERT_THAT(w, IsOk());
  ASSERT_THAT(w->Write("one\n"), IsOk());
  ASSERT_THAT(w->Commit(), IsOk());
  auto again = FileWriter::Open(home_.get(), P("/workspace/deep/er/log.txt"), WriteMode::kAppend, 0644, owner_, false);
  ASSERT_THAT(again, IsOk());
  ASSERT_THAT(again->Write("two\n"), IsOk());
  ASSERT_THAT(again->Commit(), IsOk());
  EXPECT_EQ(Read("/workspace/deep/er/log.txt"), "one\ntwo\n");
  struct stat st {};
  ASSERT_EQ(stat((root_ / "home" / "workspace" / "deep").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner_.uid);
  EXPECT_THAT(FileWriter::Open(home_.get(), P("nope/x"), WriteMode::kReplace, 0644, owner_, false),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(WalkerTest, RemoveNeverCrossesSymlinksAndMakeDirIsOwned) {
  fs::create_directories(root_ / "home" / "tree" / "sub");
  std::ofstream(root_ / "home" / "tree" / "sub" / "f") << "x";
  fs::create_directory_symlink(root_ / "outside", root_ / "home" / "tree" / "escape");
  EXPECT_THAT(RemovePath(home_.get(), P("tree"), false),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not empty")));
  ASSERT_THAT(RemovePath(home_.get(), P("tree"), true), IsOk());
  EXPECT_FALSE(fs::exists(root_ / "home" / "tree"));
  EXPECT_TRUE(fs::exists(root_ / "outside" / "secret"));  // the symlink was removed, not followed
  ASSERT_THAT(RemovePath(home_.get(), P("link_dir"), true), IsOk());
  EXPECT_TRUE(fs::exists(root_ / "outside" / "secret"));
  EXPECT_THAT(RemovePath(home_.get(), P("missing"), false), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(RemovePath(home_.get(), *ParseSandboxPath("", kTaskPaths, true), true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(MakeDirectory(home_.get(), P("a/b/c"), true, 0750, owner_), IsOk());
  EXPECT_THAT(MakeDirectory(home_.get(), P("a/b/c"), true, 0750, owner_), IsOk());
  EXPECT_THAT(MakeDirectory(home_.get(), P("a/b/c"), false, 0750, owner_), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(MakeDirectory(home_.get(), P("x/y"), false, 0750, owner_), StatusIs(absl::StatusCode::kNotFound));
  struct stat st {};
  ASSERT_EQ(stat((root_ / "home" / "a" / "b" / "c").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner_.uid);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
}

TEST_F(WalkerTest, StatDoesNotFollowAFinalSymlink) {
  auto st = StatPath(home_.get(), P("link_file"));
  ASSERT_THAT(st, IsOk());
  EXPECT_TRUE(S_ISLNK(st->st_mode));
  auto home = StatPath(home_.get(), *ParseSandboxPath("", kTaskPaths, true));
  ASSERT_THAT(home, IsOk());
  EXPECT_TRUE(S_ISDIR(home->st_mode));
}

}  // namespace
}  // namespace corral::sandbox
