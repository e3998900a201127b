// ForkSandbox for real (root): children see the parent's files as of the fork, as their own, and nothing written
// after it by the parent or a sibling (its /tmp too, unless asked to start empty); the parent keeps its identity,
// files and /tmp, mounted anew at its first use after the fork; a fork is refused while a process runs; layers are
// shared, removed with their last user, and nothing is left once all are deleted.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "libs/core/testing/fake_clock.h"
#include "services/sandbox_host/fork/fork_layers.h"
#include "services/sandbox_host/images/image_root.h"
#include "services/sandbox_host/linux/process_sweep.h"
#include "services/sandbox_host/tests/fork_fixture.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST_F(ForkTest, ChildrenSeeTheParentAsOfTheForkAsTheirOwnAndNoLaterWrites) {
  SandboxSpec spec;
  spec.task_paths = {"/workspace"};
  auto parent = NewSandbox(spec);
  ASSERT_NE(parent, nullptr);
  Sh(parent,
     "echo v1 > note && mkdir -p d/e && echo deep > d/e/f && echo secret > keep && chmod 600 keep && "
     "echo ws > /workspace/w && echo scratch > /tmp/t");
  const std::string id = parent->id;
  const uid_t parent_uid = parent->uid;
  parent.reset();
  auto children = Fork(id, 2);
  ASSERT_EQ(children.size(), 2u);
  auto after = Current(id);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->uid, parent_uid);
  // Later writes: the parent's and a sibling's.
  Sh(after, "echo v2 > note && rm keep && echo later > later");
  Sh(children[0], "echo mine > sibling && echo changed > d/e/f");

  for (const auto& child : children) EXPECT_NE(child->uid, parent_uid);
  const std::string seen = Sh(children[1],
                              "id -u; cat note d/e/f keep /workspace/w; stat -c %u keep; ls /tmp | wc -l; "
                              "test ! -e later && test ! -e sibling && echo alone");
  EXPECT_EQ(seen, absl::StrCat(children[1]->uid, "\nv1\ndeep\nsecret\nws\n", children[1]->uid, "\n1\nalone\n"));
  EXPECT_EQ(Sh(children[1], "cat /tmp/t; echo own > /tmp/t; cat /tmp/t"), "scratch\nown\n");  // the parent's /tmp
  // Its own: it may change, append to and remove what it inherited, rename inherited directories.
  Sh(children[1], "echo more >> note && chmod 644 keep && rm d/e/f && mv d moved && echo new > /workspace/w2");
  EXPECT_EQ(Sh(children[1], "cat note; ls moved/e | wc -l"), "v1\nmore\n0\n");
  // The parent kept its files (as it changed them) and its /tmp; the first child saw its own change only.
  EXPECT_EQ(Sh(after, "cat note /tmp/t; test ! -e keep && echo gone; cat d/e/f"), "v2\nscratch\ngone\ndeep\n");
  EXPECT_EQ(Sh(children[0], "cat d/e/f note /tmp/t"), "changed\nv1\nscratch\n");
  // Nothing of the others is reachable: not the parent's home, not a sibling's, not the layers on the host.
  Collected reach =
      Run(children[1], {"sh", "-c",
                        absl::StrCat("cat ", after->home, "/note; cat ", children[0]->home, "/sibling; ls ",
                                     layers_->dir(), "; echo v3 > ", after->home, "/note")});
  EXPECT_EQ(reach.out, "");
  EXPECT_THAT(reach.err, HasSubstr("Permission denied"));
  EXPECT_EQ(Sh(after, "cat note"), "v2\n");
}

TEST_F(ForkTest, AChildAskedForAnEmptyTmpSeesNoneOfTheParents) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  Sh(parent, "echo left > /tmp/left && echo home > note");
  const std::string id = parent->id;
  parent.reset();
  auto children = Fork(id, 1, /*empty_tmp=*/true);
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(Sh(children[0], "ls -A /tmp | wc -l; cat note; echo own > /tmp/t && cat /tmp/t"), "0\nhome\nown\n");
  EXPECT_EQ(Sh(Current(id), "cat /tmp/left; ls /tmp"), "left\nleft\n");
}

TEST_F(ForkTest, AForkIsRefusedWhileAProcessRunsAndCallsWaitForIt) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  Collected c = Run(parent, {"sh", "-c", "setsid sleep 30 > /dev/null 2>&1 < /dev/null & echo started"});
  ASSERT_EQ(c.out, "started\n");
  const std::string id = parent->id;
  parent.reset();
  auto refused = manager_->Fork(id, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("process(es) running"));
  EXPECT_EQ(manager_->live(), 1) << "nothing was made";
  EXPECT_EQ(LayersOnDisk(), 0u) << "nothing was frozen";
  ASSERT_THAT(manager_->KillAllProcesses(id), IsOk());
  EXPECT_EQ(Fork(id, 1).size(), 1u);
  // A reference held elsewhere (a call under way) refuses it too.
  {
    auto held = Current(id);
    EXPECT_EQ(manager_->Fork(id, 1).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  // With a wait, the fork waits for the process to end, and a call meanwhile is told to come back.
  ASSERT_EQ(Run(Current(id), {"sh", "-c", "setsid sleep 1 > /dev/null 2>&1 < /dev/null &"}).exit.exit_code, 0);
  absl::Notification forked;
  std::optional<absl::StatusOr<SandboxManager::CreateResult>> waited;
  std::thread forking([&] {
    waited = manager_->Fork(id, 1, {}, absl::Seconds(10));
    forked.Notify();
  });
  absl::Status during = absl::OkStatus();
  while (!forked.HasBeenNotified() && during.ok()) during = manager_->Find(id).status();
  forking.join();
  ASSERT_THAT(*waited, IsOk());
  EXPECT_EQ((*waited)->created.size(), 1u);
  EXPECT_EQ(during.code(), absl::StatusCode::kUnavailable);
  // A delete while a fork waits: the fork gives up, the delete goes through.
  ASSERT_EQ(Run(Current(id), {"sh", "-c", "setsid sleep 30 > /dev/null 2>&1 < /dev/null &"}).exit.exit_code, 0);
  std::optional<absl::StatusOr<SandboxManager::CreateResult>> abandoned;
  std::thread forking_again([&] { abandoned = manager_->Fork(id, 1, {}, absl::Seconds(60)); });
  while (manager_->Find(id).ok()) {
  }
  EXPECT_TRUE(manager_->Delete(id));
  forking_again.join();
  EXPECT_EQ(abandoned->status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(manager_->Find(id).status().code(), absl::StatusCode::kNotFound);
}

// The wait for the parent's processes runs on the manager's clock (a fake one here: no real hour passes), and a
// delete cuts it short whatever the clock says.
TEST_F(ForkTest, AForkWaitsOnTheManagersClockAndADeleteCutsTheWaitShort) {
  manager_.reset();
  options_.default_idle_timeout = absl::Hours(24);  // the fake hours below evict nothing
  manager_ = std::make_unique<SandboxManager>(options_, features_, &fake_clock_, &signer_,
                                              SandboxManagerParts{.layers = layers_.get()});
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  ASSERT_EQ(Run(parent, {"sh", "-c", "setsid sleep 60 > /dev/null 2>&1 < /dev/null &"}).exit.exit_code, 0);
  const std::string id = parent->id;
  parent.reset();
  auto fork_in_background = [&](absl::Notification& done, absl::Status& status) {
    return std::thread([&] {
      status = manager_->Fork(id, 1, {}, absl::Hours(1)).status();
      done.Notify();
    });
  };
  const absl::Time start = fake_clock_.Now();
  absl::Notification gave_up;
  absl::Status waited;
  std::thread waiting = fork_in_background(gave_up, waited);
  while (!gave_up.WaitForNotificationWithTimeout(absl::Milliseconds(5))) fake_clock_.Advance(absl::Minutes(1));
  waiting.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kFailedPrecondition) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("1 process(es) running"));
  EXPECT_GE(fake_clock_.Now() - start, absl::Hours(1)) << "it gave up only when the manager's clock said so";
  EXPECT_THAT(manager_->Find(id), IsOk()) << "the parent is as it was";

  absl::Notification aborted;
  absl::Status abandoned;
  std::thread abandoning = fork_in_background(aborted, abandoned);
  while (manager_->Find(id).ok()) {
  }
  EXPECT_TRUE(manager_->Delete(id)) << "the delete waits for the fork, which gives up at once";
  abandoning.join();
  EXPECT_EQ(abandoned.code(), absl::StatusCode::kAborted) << abandoned;
  EXPECT_EQ(manager_->live(), 0);
  EXPECT_EQ(LayersOnDisk(), 0u);
}

TEST_F(ForkTest, LayersAreSharedAndGoWithTheirLastUserAndNothingIsLeft) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  Sh(parent, "head -c 1048576 /dev/urandom > blob && echo a > a");
  const std::string id = parent->id;
  parent.reset();
  auto first = Fork(id, 3);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(LayersOnDisk(), 1u) << "the home became one layer: nothing copied";
  // Nothing written since: the next fork shares the layers as they are.
  auto again = Fork(id, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(LayersOnDisk(), 1u);
  // A write, then a fork: one layer more, over the first. A child's fork stacks on its own layers.
  Sh(Current(id), "echo b > b");
  auto second = Fork(id, 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(Sh(second[0], "cat a b; cmp -s blob blob && echo same"), "a\nb\nsame\n");
  Sh(first[0], "echo c > c");
  const std::string child = first[0]->id;
  first[0].reset();  // a reference held is a call under way: the fork would wait for it, then refuse
  auto grandchildren = Fork(child, 2);
  ASSERT_EQ(grandchildren.size(), 2u);
  EXPECT_EQ(Sh(grandchildren[1], "cat a c; test ! -e b && echo no-b"), "a\nc\nno-b\n");
  EXPECT_EQ(LayersOnDisk(), 3u);

  // The parent goes first: its children stay whole.
  second.clear();
  again.clear();
  ASSERT_TRUE(manager_->Delete(id));
  EXPECT_EQ(Sh(grandchildren[0], "cat a c"), "a\nc\n");
  EXPECT_EQ(Sh(first[2], "cat a"), "a\n");
  // Then every other: no layer, home, uid or process is left.
  std::vector<std::string> ids;
  for (const auto& sb : manager_->List()) ids.push_back(sb->id);
  first.clear();
  grandchildren.clear();
  for (const auto& other : ids) EXPECT_TRUE(manager_->Delete(other));
  EXPECT_EQ(manager_->live(), 0);
  EXPECT_EQ(LayersOnDisk(), 0u);
  EXPECT_TRUE(fs::is_empty(options_.root + "/homes"));
  EXPECT_EQ(manager_->uids().in_use(), 0u);
  for (uid_t uid = options_.uid_first; uid <= options_.uid_last; ++uid) EXPECT_TRUE(ProcessesOf(uid).empty()) << uid;
}

// The parent's new generation (its files mounted anew over the layer they were frozen into) is built by the first
// call that needs it, not by the fork: a parent only deleted after its fork, as a verifier's is, never pays for it.
TEST_F(ForkTest, AParentGetsItsNewGenerationAtItsNextUseAndADeleteNeedsNone) {
  auto used = NewSandbox();
  auto deleted = NewSandbox();
  ASSERT_NE(used, nullptr);
  ASSERT_NE(deleted, nullptr);
  Sh(used, "echo v1 > note && echo t1 > /tmp/t");
  Sh(deleted, "echo gone > note");
  const std::string used_id = used->id, deleted_id = deleted->id;
  const Sandbox* used_before = used.get();
  const Sandbox* deleted_before = deleted.get();
  used.reset();
  deleted.reset();
  auto children = Fork(used_id, 1);
  auto orphans = Fork(deleted_id, 1);
  ASSERT_EQ(children.size(), 1u);
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(Listed(used_id), used_before) << "the fork built no new generation";
  EXPECT_EQ(Listed(deleted_id), deleted_before);
  // A second fork before any use shares the same layers: nothing is frozen or built again.
  auto more = Fork(used_id, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(Listed(used_id), used_before);
  EXPECT_EQ(LayersOnDisk(), 2u);
  // The first call builds it; the parent's files and /tmp are as they were, its writes its own.
  auto after = Current(used_id);
  ASSERT_NE(after, nullptr);
  EXPECT_NE(after.get(), used_before);
  EXPECT_EQ(Listed(used_id), after.get());
  EXPECT_EQ(Sh(after, "cat note /tmp/t; echo v2 > note; cat note"), "v1\nt1\nv2\n");
  EXPECT_EQ(Sh(children[0], "cat note"), "v1\n");
  EXPECT_EQ(Sh(more[0], "cat note /tmp/t"), "v1\nt1\n");
  // The other is deleted as it is; its child keeps the files; nothing is left once all are gone.
  ASSERT_TRUE(manager_->Delete(deleted_id));
  EXPECT_EQ(Sh(orphans[0], "cat note"), "gone\n");
  std::vector<std::string> ids;
  for (const auto& sb : manager_->List()) ids.push_back(sb->id);
  children.clear();
  orphans.clear();
  more.clear();
  after.reset();
  for (const auto& id : ids) EXPECT_TRUE(manager_->Delete(id));
  EXPECT_EQ(LayersOnDisk(), 0u);
  EXPECT_TRUE(fs::is_empty(options_.root + "/homes"));
  EXPECT_EQ(manager_->uids().in_use(), 0u);
}

// The first calls after a fork, at once: one builds the parent's new generation, the others wait for it (none is
// refused), and all get the same one.
TEST_F(ForkTest, CallsThatComeWhileTheNewGenerationIsBuiltWaitForIt) {
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  Sh(parent, "echo v1 > note");
  const std::string id = parent->id;
  parent.reset();
  auto children = Fork(id, 1);
  ASSERT_EQ(children.size(), 1u);
  constexpr int kCalls = 8;
  std::vector<absl::StatusOr<std::shared_ptr<const Sandbox>>> found(kCalls, absl::UnknownError("not run"));
  std::vector<std::thread> calls;
  absl::Notification go;
  for (int i = 0; i < kCalls; ++i) {
    calls.emplace_back([&, i] {
      go.WaitForNotification();
      found[i] = manager_->Find(id);
    });
  }
  go.Notify();
  for (std::thread& t : calls) t.join();
  for (const auto& f : found) {
    ASSERT_THAT(f, IsOk());
    EXPECT_EQ(f->get(), found[0]->get());
  }
  EXPECT_EQ(Sh(*found[0], "cat note"), "v1\n");
}

// A fork is a use of the parent: its idle time starts again then, though its new generation waits for its next
// call; one left alone after it is evicted as it is.
TEST_F(ForkTest, AForkIsAUseOfTheParentForItsIdleTime) {
  manager_.reset();
  manager_ = std::make_unique<SandboxManager>(options_, features_, &fake_clock_, &signer_,
                                              SandboxManagerParts{.layers = layers_.get()});
  SandboxSpec spec;
  spec.idle_timeout = absl::Seconds(10);
  auto parent = NewSandbox(spec);
  ASSERT_NE(parent, nullptr);  // no command: the exec manager's clock is the real one
  const std::string id = parent->id;
  parent.reset();
  fake_clock_.Advance(absl::Seconds(9));
  ASSERT_EQ(Fork(id, 1).size(), 1u);
  fake_clock_.Advance(absl::Seconds(9));  // 18 s since its last call, 9 since the fork
  EXPECT_NE(Listed(id), nullptr);
  fake_clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Listed(id), nullptr);
}

TEST_F(ForkTest, BadForksAreRefusedAndChangeNothing) {
  EXPECT_EQ(manager_->Fork("sb-nobody", 1).status().code(), absl::StatusCode::kNotFound);
  auto parent = NewSandbox();
  ASSERT_NE(parent, nullptr);
  const std::string id = parent->id;
  parent.reset();
  EXPECT_EQ(manager_->Fork(id, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(manager_->Fork(id, 1, {{"Bad Key", "x"}}).status().code(), absl::StatusCode::kInvalidArgument);
  // Beyond capacity: what does not fit is rejected, never over-committed.
  auto r = manager_->Fork(id, 40);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->created.size(), 15u);
  EXPECT_EQ(r->rejected, 25);
  EXPECT_EQ(r->rejected_reason, "host capacity");
}

}  // namespace
}  // namespace corral::sandbox
