// CreateUserNamespace + CreateImageRoot for real: a process that joins them runs the image's own shell as root
// inside, its writes land in the upper layer owned by its pool uid outside, and the host's files are out of sight.
#include "services/sandbox_host/images/image_root.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/fork/fork_layers.h"
#include "services/sandbox_host/images/layer_unpack.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/tests/layer_scratch.h"
#include "tests/support/uid_range.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

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
  const fs::path link = layer / "bin" / fs::path(binary).filename();
  if (!fs::exists(link)) fs::create_symlink(files[0], link);
}

class ImageRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root";
    uids_.emplace(21000, 28999, 2);  // the sandbox unit tests' range (uid_range.h)
    uid_ = static_cast<uid_t>(uids_->first());
    base_ = LayerScratchDir("corral-imageroot-" + std::to_string(getpid()));
    if (base_.empty()) GTEST_SKIP() << "neither the temp directory nor /var/tmp can hold layers (overlayfs)";
    for (const char* d : {"base", "top", "sb/rw", "sb/mnt", "child/rw", "child/mnt"}) {
      fs::create_directories(base_ / d);
    }
    for (const char* tool : {"/bin/sh", "/bin/cat", "/bin/rm", "/bin/chown", "/bin/mkdir"})
      CopyWithLibraries(tool, base_ / "base");
    fs::create_directories(base_ / "base/etc");
    std::ofstream(base_ / "base/etc/hello") << "from the image\n";
    fs::create_directories(base_ / "top/etc");
    std::ofstream(base_ / "top/etc/motd") << "top layer\n";
    fs::permissions(base_ / "base/etc/hello", fs::perms(0600));  // root's only: readable only as the idmapped root
  }
  void TearDown() override {
    if (!base_.empty()) fs::remove_all(base_);
  }

  // Runs `script` with /bin/sh in the image root as `uid` inside (root by default); returns its exit status and
  // output.
  std::pair<int, std::string> RunInside(int mnt_fd, int userns_fd, const std::string& script, uid_t uid = 0) {
    const std::string out_path = (base_ / "out.txt").string();
    const pid_t pid = fork();
    if (pid == 0) {
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(out, 2);
      if (setns(mnt_fd, CLONE_NEWNS) != 0 || setns(userns_fd, CLONE_NEWUSER) != 0 || setresgid(uid, uid, uid) != 0 ||
          setresuid(uid, uid, uid) != 0) {
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

  // The root of a sandbox that is root inside, over `layers` (top first) of the scratch directory.
  ImageRootSpec Spec(const std::vector<std::string>& layers, int userns_fd, int64_t tmpfs_bytes = 0) {
    ImageRootSpec spec{.rw_dir = (base_ / "sb/rw").string(),
                       .rw_tmpfs_bytes = tmpfs_bytes,
                       .mount_point = (base_ / "sb/mnt").string(),
                       .root_owner = uid_,
                       .userns_fd = userns_fd,
                       .uid = uid_,
                       .gid = uid_};
    for (const std::string& layer : layers) spec.lower_dirs.push_back((base_ / layer).string());
    return spec;
  }

  std::optional<testing::UidRange> uids_;
  uid_t uid_ = 0;
  fs::path base_;
};

TEST_F(ImageRootTest, TheSandboxIsRootInItsImageAndItsPoolUidOutside) {
  auto userns = CreateUserNamespace(uid_, uid_);
  ASSERT_THAT(userns, IsOk());
  auto root = CreateImageRoot(Spec({"top", "base"}, userns->get()));
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
  EXPECT_THAT(out, HasSubstr("uid 0\n"));                  // root inside
  EXPECT_THAT(out, HasSubstr("hello: from the image\n"));  // a root-owned 0600 file of the image is its own
  EXPECT_THAT(out, HasSubstr("motd: top layer\n"));
  EXPECT_THAT(out, HasSubstr("wrote /etc/new\n"));
  EXPECT_THAT(out, HasSubstr("host hidden\n"));
  EXPECT_THAT(out, HasSubstr("dev null\n"));
  EXPECT_THAT(out, HasSubstr("tmp ok\n"));
  // Outside, the write is in the sandbox's upper layer, owned by its pool uid; the image's layers are untouched.
  struct stat st {};
  ASSERT_EQ(stat((base_ / "sb/rw/upper/etc/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_);
  ASSERT_EQ(stat((base_ / "sb/rw/upper").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_);  // "/" is the sandbox's own
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

// Each namespace's holder process is reaped by a later call, not waited for: many in a row leave no pile of
// zombies (a holder left unreaped would stay one, its stack held with it).
TEST_F(ImageRootTest, UserNamespaceHoldersAreReapedNotLeftAsZombies) {
  // This process's children: the exited ones not yet reaped (zombies), or the others.
  auto children = [](bool zombies) {
    std::vector<pid_t> pids;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line) || line.rfind(')') == std::string::npos) continue;
      std::istringstream rest(line.substr(line.rfind(')') + 2));
      char state = 0;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid == getpid() && (state == 'Z') == zombies) pids.push_back(std::stoi(entry.path().filename()));
    }
    return pids;
  };
  const size_t zombies_before = children(true).size();
  const std::vector<pid_t> running_before = children(false);
  constexpr int kMade = 48;
  for (int i = 0; i < kMade; ++i) ASSERT_THAT(CreateUserNamespace(uid_, uid_), IsOk());
  // Once every holder has exited (on a loaded machine some take a while: each exit is waited for by its pidfd),
  // the next call reaps them all, and only its own holder may be left.
  for (pid_t pid : children(false)) {
    if (std::find(running_before.begin(), running_before.end(), pid) != running_before.end()) continue;
    UniqueFd exited(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    pollfd p{.fd = exited.get(), .events = POLLIN, .revents = 0};
    if (exited.valid()) poll(&p, 1, -1);
  }
  ASSERT_EQ(children(false), running_before);
  ASSERT_THAT(CreateUserNamespace(uid_, uid_), IsOk());
  EXPECT_LE(children(true).size() - zombies_before, 1u);
}

TEST_F(ImageRootTest, ATmpfsUpperLayerCapsWhatTheSandboxWritesAndLeavesNothingOnDisk) {
  auto userns = CreateUserNamespace(uid_, uid_);
  ASSERT_THAT(userns, IsOk());
  auto root = CreateImageRoot(Spec({"base"}, userns->get(), 1 << 20));
  ASSERT_THAT(root, IsOk());
  // 1 KiB, appended up to 2 MiB to a file in "/" and to one in /tmp: each stops near 1 MiB.
  auto [code, out] = RunInside(root->mnt.get(), userns->get(), R"(
    s=x; for i in 1 2 3 4 5 6 7 8 9 10; do s=$s$s; done
    for f in /big /tmp/big; do
      n=0
      while [ $n -lt 2048 ] && printf '%s' "$s" >> $f 2>/dev/null; do n=$((n+1)); done
      echo "$f $n KiB"
    done
    echo small > /etc/after-full 2>/dev/null || echo "root full"
  )");
  EXPECT_EQ(code, 0) << out;
  for (const char* f : {"/big", "/tmp/big"}) {
    const size_t at = out.find(absl::StrCat(f, " "));
    ASSERT_NE(at, std::string::npos) << out;
    const int kib = std::atoi(out.c_str() + at + strlen(f) + 1);
    EXPECT_GE(kib, 900) << f << ": " << out;  // the tmpfs's own bookkeeping takes a few pages
    EXPECT_LE(kib, 1024) << f << ": " << out;
  }
  EXPECT_THAT(out, HasSubstr("root full\n"));
  // The writes are in the sandbox's mount namespace only: the host's directory holds nothing.
  EXPECT_TRUE(fs::is_empty(base_ / "sb/rw"));
}

// A fork of an image sandbox (ForkLayers::FreezeTree): the parent's tmpfs upper, frozen in the holder mount
// namespace, under a child of another uid (idmapped) and under the parent's own next generation.
TEST_F(ImageRootTest, AFrozenTmpfsUpperIsTheChildsOwnAndTheParentKeepsItsFilesAndTmp) {
  const uid_t parent_uid = uid_, child_uid = uids_->last();
  ASSERT_NE(parent_uid, child_uid);
  ForkLayers layers((base_ / "state").string());
  ASSERT_GE(layers.holder_ns(), 0);
  auto parent_ns = CreateUserNamespace(parent_uid, parent_uid);
  ASSERT_THAT(parent_ns, IsOk());
  auto parent = CreateImageRoot(Spec({"top", "base"}, parent_ns->get(), 1 << 20));
  ASSERT_THAT(parent, IsOk());
  ASSERT_TRUE(parent->rw_tree.valid());
  auto [code, out] = RunInside(parent->mnt.get(), parent_ns->get(), R"(
    echo parent > /etc/parent && rm /etc/motd && echo t > /tmp/ptmp && echo ok
  )");
  ASSERT_EQ(code, 0) << out;
  EXPECT_FALSE(IsEmptyDirAt(parent->rw_tree.get(), "upper"));
  auto layer = layers.FreezeTree(parent->rw_tree, parent_uid, nullptr);
  ASSERT_THAT(layer, IsOk());

  // The child: root inside a namespace of its own uid; the parent's files (idmapped) are its own, the image's
  // too; the parent's removal holds; /tmp is empty; its writes stay in its own upper layer.
  auto child_ns = CreateUserNamespace(child_uid, child_uid);
  auto layer_ns = CreateUserNamespace(child_uid, child_uid, parent_uid, parent_uid);
  ASSERT_THAT(child_ns, IsOk());
  ASSERT_THAT(layer_ns, IsOk());
  ImageRootSpec child_spec = Spec({"top", "base"}, child_ns->get(), 1 << 20);
  child_spec.rw_dir = (base_ / "child/rw").string();
  child_spec.mount_point = (base_ / "child/mnt").string();
  child_spec.uid = child_spec.gid = child_uid;
  child_spec.held_layers = {{(*layer)->dir, layer_ns->get()}};
  child_spec.holder_ns_fd = layers.holder_ns();
  child_spec.host_ns_fd = layers.host_ns();
  auto child = CreateImageRoot(child_spec);
  ASSERT_THAT(child, IsOk());
  std::tie(code, out) = RunInside(child->mnt.get(), child_ns->get(), R"(
    read line < /etc/parent && echo "parent: $line"
    read line < /etc/hello && echo "hello: $line"
    [ -e /etc/motd ] || echo "motd removed"
    [ -e /tmp/ptmp ] || echo "tmp empty"
    echo child >> /etc/parent && echo mine > /etc/child && echo "wrote"
  )");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("parent: parent\n"));
  EXPECT_THAT(out, HasSubstr("hello: from the image\n"));
  EXPECT_THAT(out, HasSubstr("motd removed\n"));
  EXPECT_THAT(out, HasSubstr("tmp empty\n"));
  EXPECT_THAT(out, HasSubstr("wrote\n"));

  // The parent's next generation: the same files (not the child's writes) and its /tmp, carried over.
  ImageRootSpec next_spec = Spec({"top", "base"}, parent_ns->get(), 1 << 20);
  next_spec.held_layers = {{(*layer)->dir, -1}};
  next_spec.holder_ns_fd = layers.holder_ns();
  next_spec.host_ns_fd = layers.host_ns();
  next_spec.carry_ns_fd = parent->mnt.get();
  auto next = CreateImageRoot(next_spec);
  ASSERT_THAT(next, IsOk());
  std::tie(code, out) = RunInside(next->mnt.get(), parent_ns->get(), R"(
    cat /etc/parent; read line < /tmp/ptmp && echo "tmp: $line"
    [ -e /etc/child ] || echo "no child file"
    [ -e /etc/motd ] || echo "motd removed"
    echo again >> /etc/parent && echo "appended"
  )");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("parent\ntmp: t\n"));  // without the child's line
  EXPECT_THAT(out, HasSubstr("no child file\nmotd removed\nappended\n"));

  // The layer is gone from the holder with its last user, and the host's mounts never held it.
  const std::string dir = (*layer)->dir;
  EXPECT_TRUE(fs::exists(dir));
  layer->reset();
  EXPECT_FALSE(fs::exists(dir));
  std::ifstream mounts("/proc/self/mountinfo");
  std::string all((std::istreambuf_iterator<char>(mounts)), std::istreambuf_iterator<char>());
  EXPECT_THAT(all, Not(HasSubstr((base_ / "state").string())));
}

// An image whose user is 1000: that user is the pool uid outside, root and every other id inside are ids of the
// sandbox's own block, chown works between them, and an id beyond the block is refused.
TEST_F(ImageRootTest, RootAndOtherUsersInsideAreIdsOfTheSandboxsOwnBlock) {
  auto userns = CreateSandboxUserNamespace(uid_, 1000, 1000);
  ASSERT_THAT(userns, IsOk());
  ASSERT_TRUE(userns->sub_ids);
  const uid_t block = *SubIdBase(uid_);
  ImageRootSpec spec = Spec({"top", "base"}, userns->fd.get());
  spec.root_owner = block;  // root inside's, as in an image whose user is not root
  auto root = CreateImageRoot(spec);
  ASSERT_THAT(root, IsOk());
  auto [code, out] = RunInside(root->mnt.get(), userns->fd.get(), R"(
    echo root > /etc/by-root && echo "root wrote"
    echo agent > /etc/for-agent && chown 1234:1234 /etc/for-agent && echo "chowned"
    chown 70000 /etc/by-root 2>/dev/null || echo "beyond the block refused"
    mkdir -p /home/u && chown 1000:1000 /home/u && echo "home given"
  )");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("root wrote\nchowned\nbeyond the block refused\nhome given\n"));
  std::tie(code, out) = RunInside(root->mnt.get(), userns->fd.get(), "echo mine > /home/u/f && echo ok", 1000);
  EXPECT_EQ(code, 0) << out;
  struct stat st {};
  ASSERT_EQ(stat((base_ / "sb/rw/upper/etc/by-root").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, block);  // root inside
  ASSERT_EQ(stat((base_ / "sb/rw/upper/etc/for-agent").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, block + 1234);
  EXPECT_EQ(st.st_gid, block + 1234);
  ASSERT_EQ(stat((base_ / "sb/rw/upper/home/u/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_);  // the image's user is the pool uid
  // A layer made of it holds the ids inside again.
  ASSERT_THAT(AdoptUpperAsLayer((base_ / "sb/rw/upper").string(), uid_, uid_, 1000, 1000), IsOk());
  ASSERT_EQ(stat((base_ / "sb/rw/upper/etc/for-agent").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  ASSERT_EQ(stat((base_ / "sb/rw/upper/etc/by-root").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  ASSERT_EQ(stat((base_ / "sb/rw/upper/home/u/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
}

// Teardown's sweep: processes of the block (root inside an image sandbox, a user it added) are the pool uid's.
TEST_F(ImageRootTest, ASweepOfAPoolUidKillsTheProcessesOfItsBlock) {
  const uid_t id = *SubIdBase(uid_) + 1234;
  int switched[2];
  ASSERT_EQ(pipe(switched), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    if (setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0) _exit(99);
    if (write(switched[1], "x", 1) != 1) _exit(97);  // the sweep can see it from now on
    execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
    _exit(98);
  }
  ASSERT_GT(pid, 0);
  close(switched[1]);
  char c = 0;
  ASSERT_EQ(read(switched[0], &c, 1), 1);
  close(switched[0]);
  EXPECT_THAT(ProcessesOf(uid_), ::testing::Contains(pid));
  EXPECT_TRUE(KillAllOf(uid_));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

TEST(SubIdsTest, EachPoolUidHasItsOwnBlockAndTheMapsCoverEveryIdOnce) {
  EXPECT_EQ(SubIdBase(20000), 20000u << 16);
  EXPECT_EQ(SubIdBase(0), std::nullopt);
  EXPECT_EQ(SubIdBase(65535), std::nullopt);
  EXPECT_EQ(SubIdOwner((20000u << 16) + 5), 20000u);
  EXPECT_EQ(SubIdOwner(20000), 20000u);
  // Root image: 0 is the pool uid, 1 … 65535 the block's.
  IdMap root = SandboxIdMap(20000, 0);
  ASSERT_EQ(root.size(), 2u);
  EXPECT_EQ(root[0].inside, 0u);
  EXPECT_EQ(root[0].outside, 20000u);
  EXPECT_EQ(root[1].inside, 1u);
  EXPECT_EQ(root[1].outside, (20000u << 16) + 1);
  EXPECT_EQ(root[1].count, 65535u);
  // A user of 1000: three extents, 65536 ids in all, each id once inside and outside.
  IdMap user = SandboxIdMap(20000, 1000);
  ASSERT_EQ(user.size(), 3u);
  uint64_t total = 0;
  for (const IdExtent& e : user) total += e.count;
  EXPECT_EQ(total, kSubIds);
  EXPECT_EQ(user[1].inside, 1000u);
  EXPECT_EQ(user[1].outside, 20000u);
  for (uint32_t id : {0u, 999u, 1000u, 1001u, 65535u}) EXPECT_EQ(InsideId(MapId(user, id, 0), 20000, 1000), id);
  EXPECT_EQ(InsideId(12345, 20000, 1000), 12345u);  // not the sandbox's: as it is
  // Without a block only the image's user is mapped.
  EXPECT_EQ(SandboxIdMap(70000, 0).size(), 1u);
  // A layer written by sandbox 20000 is shown as 20001's: the pool uid and the block.
  IdMap owner = OwnerIdMap(20000, 20001);
  ASSERT_EQ(owner.size(), 2u);
  EXPECT_EQ(owner[1].inside, 20000u << 16);
  EXPECT_EQ(owner[1].outside, 20001u << 16);
  EXPECT_EQ(MapId(owner, 20000, 7), 20001u);
  EXPECT_EQ(MapId(owner, (20000u << 16) + 1000, 7), (20001u << 16) + 1000);
  EXPECT_EQ(MapId(owner, 12345, 7), 7u);  // none of 20000's: the fallback
}

TEST_F(ImageRootTest, TheProbeFindsIdmappedMountsWhereTheStoreLives) { EXPECT_TRUE(CanUseImages(base_.string())); }

}  // namespace
}  // namespace corral::sandbox
