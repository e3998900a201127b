// Sandbox templates against an in-memory host: a build is a placed and released sandbox whose template the host
// keeps; a failing setup fails the build with the host's message; names belong to their owner; a tag names the
// newest ready build; a restart ends the builds it interrupted; files are kept by hash, oldest dropped first;
// an owner's templates are bounded.
#include "services/scheduler/lease/sandbox_templates.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/api/proto_time.h"
#include "libs/async/testing/poll_await.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "services/sandbox_host/client/testing/fake_host.h"

namespace corral::scheduler {
namespace {

namespace asio = boost::asio;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

class MemoryTemplateLog final : public TemplateLog {
 public:
  void SaveTemplate(const v1::SandboxTemplate& t, std::function<void(absl::Status)> done) override {
    rows[t.template_id()] = t;
    done(absl::OkStatus());
  }
  void DropTemplate(const std::string& id) override { rows.erase(id); }
  void SaveTemplateFile(const v1::TemplateFile& file, absl::Time time,
                        std::function<void(absl::Status)> done) override {
    files[{file.owner(), file.hash()}] = {file.content(), time};
    done(absl::OkStatus());
  }
  void DropTemplateFile(const std::string& owner, const std::string& hash) override { files.erase({owner, hash}); }
  absl::StatusOr<std::string> LoadTemplateFile(const std::string& owner, const std::string& hash) override {
    auto it = files.find({owner, hash});
    if (it == files.end()) return absl::NotFoundError("no such file");
    return it->second.first;
  }
  std::map<std::string, v1::SandboxTemplate> rows;
  std::map<std::pair<std::string, std::string>, std::pair<std::string, absl::Time>> files;
};

class SandboxTemplatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = std::make_shared<sandbox::FakeHost>("h1", &clock_, /*capacity=*/4);
    RegistryOptions options;
    options.scheduler_id = "sched-1";
    registry_ = std::make_unique<HostRegistry>(
        options, std::vector<std::string>{"h1"}, &clock_, HostRegistry::Events{},
        [this](const std::string&) -> absl::StatusOr<std::shared_ptr<sandbox::HostApi>> { return host_; });
    placer_ = std::make_unique<SandboxPlacer>(registry_.get(), nullptr, &clock_);
    leases_ = std::make_unique<SandboxLeases>(registry_.get(), placer_.get(), &clock_, nullptr, LeaseOptions());
    Restart();
    Await(registry_->PollOnce());
  }
  // A scheduler's templates over the same journal: called again, a restart.
  void Restart() {
    std::vector<v1::SandboxTemplate> rows;
    for (const auto& [id, t] : log_.rows) rows.push_back(t);
    std::vector<TemplateFileEntry> files;
    for (const auto& [key, file] : log_.files) {
      files.push_back({key.first, key.second, file.first.size(), file.second});
    }
    templates_ = std::make_unique<SandboxTemplates>(leases_.get(), io_.get_executor(), &clock_, &log_,
                                                    TemplateLimits{.max_templates = 3, .max_files = 2});
    templates_->Restore(std::move(rows), std::move(files));
  }
  template <typename T>
  T Await(asio::awaitable<T> aw) {
    return async::PollAwait(io_, std::move(aw), [this] { clock_.RunDue(); });
  }
  // Runs what was started (the builds) until nothing is left to run.
  void Settle() {
    for (int i = 0; i < 1000; ++i) {
      io_.restart();
      if (io_.poll() == 0) return;
    }
  }
  absl::StatusOr<v1::SandboxTemplate> RequestBuild(const std::string& owner, const std::string& name,
                                                   std::vector<std::string> tags = {}) {
    v1::RequestTemplateBuildRequest r;
    r.set_owner(owner);
    r.set_name(name);
    for (auto& t : tags) r.add_tags(t);
    return Await(templates_->Request(std::move(r)));
  }
  absl::StatusOr<v1::SandboxTemplate> StartBuild(const v1::SandboxTemplate& t, const std::string& owner,
                                                 const std::string& command = "make") {
    v1::StartTemplateBuildRequest r;
    r.set_owner(owner);
    r.set_template_id(t.template_id());
    r.set_build_id(t.builds(t.builds_size() - 1).build_id());
    r.mutable_environment()->add_setup_commands()->add_argv(command);
    (*r.mutable_annotations())["front"] = "data";
    r.add_log_lines("[1/1] RUN make");
    return Await(templates_->Start(std::move(r)));
  }
  v1::SandboxTemplate Get(const std::string& owner, const std::string& name) {
    v1::GetTemplateRequest r;
    r.set_owner(owner);
    r.set_name(name);
    return *templates_->Get(r);
  }
  // Builds `name` once more to its end.
  v1::TemplateBuild Built(const std::string& owner, const std::string& name, const std::string& command = "make") {
    auto t = RequestBuild(owner, name);
    EXPECT_THAT(t, IsOk());
    EXPECT_THAT(StartBuild(*t, owner, command), IsOk());
    Settle();
    v1::SandboxTemplate now = Get(owner, name);
    return now.builds(now.builds_size() - 1);
  }

  FakeClock clock_;
  asio::io_context io_;
  std::shared_ptr<sandbox::FakeHost> host_;
  MemoryTemplateLog log_;
  std::unique_ptr<HostRegistry> registry_;
  std::unique_ptr<SandboxPlacer> placer_;
  std::unique_ptr<SandboxLeases> leases_;
  std::unique_ptr<SandboxTemplates> templates_;
};

TEST_F(SandboxTemplatesTest, ABuildIsASandboxPlacedOnceWhoseTemplateTheHostKeeps) {
  auto requested = RequestBuild("alice", "harbor-task");
  ASSERT_THAT(requested, IsOk());
  ASSERT_THAT(requested->builds(), SizeIs(1));
  EXPECT_EQ(requested->builds(0).status(), v1::TEMPLATE_BUILD_STATUS_WAITING);
  EXPECT_THAT(requested->builds(0).tags(), ElementsAre("default"));

  auto started = StartBuild(*requested, "alice");
  ASSERT_THAT(started, IsOk());
  EXPECT_EQ(started->builds(0).status(), v1::TEMPLATE_BUILD_STATUS_BUILDING);
  Settle();

  const v1::TemplateBuild build = Get("alice", "harbor-task").builds(0);
  EXPECT_EQ(build.status(), v1::TEMPLATE_BUILD_STATUS_READY);
  EXPECT_EQ(build.host_address(), "h1");
  EXPECT_THAT(host_->templates(), ElementsAre(build.template_key()));
  EXPECT_THAT(host_->live(), IsEmpty());  // its sandbox released
  EXPECT_EQ(build.annotations().at("front"), "data");
  ASSERT_THAT(build.logs(), SizeIs(2));
  EXPECT_EQ(build.logs(0).message(), "[1/1] RUN make");
  EXPECT_THAT(build.logs(1).message(), HasSubstr("Built in"));
  EXPECT_EQ(log_.rows.at(requested->template_id()).builds(0).status(), v1::TEMPLATE_BUILD_STATUS_READY);
  EXPECT_THAT(leases_->List(""), IsEmpty());
}

TEST_F(SandboxTemplatesTest, AFailedSetupFailsTheBuildWithTheHostsMessage) {
  host_->FailTemplates(absl::FailedPreconditionError("setup_commands[0] (make) exited with code 3; output ends: boom"));
  const v1::TemplateBuild build = Built("alice", "broken");
  EXPECT_EQ(build.status(), v1::TEMPLATE_BUILD_STATUS_FAILED);
  EXPECT_THAT(build.error(), HasSubstr("exited with code 3; output ends: boom"));
  EXPECT_EQ(build.logs(build.logs_size() - 1).level(), "error");
  EXPECT_THAT(host_->live(), IsEmpty());
}

TEST_F(SandboxTemplatesTest, NamesBelongToTheirOwnerAndBadRequestsChangeNothing) {
  auto t = RequestBuild("alice", "shared-name");
  ASSERT_THAT(t, IsOk());
  auto bobs = RequestBuild("bob", "shared-name");
  ASSERT_THAT(bobs, IsOk());
  EXPECT_NE(bobs->template_id(), t->template_id());
  EXPECT_EQ(RequestBuild("alice", "shared-name")->template_id(), t->template_id());  // a second build of it

  v1::GetTemplateRequest by_id;
  by_id.set_owner("bob");
  by_id.set_template_id(t->template_id());
  EXPECT_THAT(templates_->Get(by_id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(StartBuild(*t, "bob"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(templates_->Delete(by_id), StatusIs(absl::StatusCode::kNotFound));
  by_id.set_name("shared-name");
  EXPECT_THAT(templates_->Get(by_id), StatusIs(absl::StatusCode::kInvalidArgument));  // one of the two

  EXPECT_THAT(RequestBuild("alice", "bad name"), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(RequestBuild("alice", "second"), IsOk());
  ASSERT_THAT(RequestBuild("alice", "third"), IsOk());
  EXPECT_THAT(RequestBuild("alice", "fourth"), StatusIs(absl::StatusCode::kResourceExhausted));  // 3 per owner
  EXPECT_THAT(RequestBuild("alice", "third"), IsOk());  // another build of one it has
  EXPECT_THAT(RequestBuild("alice", "ok", {"bad tag"}), StatusIs(absl::StatusCode::kInvalidArgument));
  v1::StartTemplateBuildRequest with_files;
  with_files.set_owner("alice");
  with_files.set_template_id(t->template_id());
  with_files.set_build_id(t->builds(0).build_id());
  with_files.mutable_environment()->add_files()->set_path("x");
  EXPECT_THAT(Await(templates_->Start(with_files)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Get("alice", "shared-name").builds(0).status(), v1::TEMPLATE_BUILD_STATUS_WAITING);

  ASSERT_THAT(StartBuild(*t, "alice"), IsOk());
  EXPECT_THAT(StartBuild(*t, "alice"), StatusIs(absl::StatusCode::kFailedPrecondition));  // started already
  Settle();
  v1::GetTemplateRequest named;
  named.set_owner("alice");
  named.set_name("shared-name");
  EXPECT_THAT(templates_->Delete(named), IsOk());
  EXPECT_THAT(templates_->Get(named), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(log_.rows.contains(t->template_id()));
  EXPECT_THAT(Get("bob", "shared-name").builds(), SizeIs(1));
}

TEST_F(SandboxTemplatesTest, ATagNamesTheNewestReadyBuild) {
  const v1::TemplateBuild first = Built("alice", "tpl");
  const v1::TemplateBuild second = Built("alice", "tpl", "make again");
  ASSERT_EQ(second.status(), v1::TEMPLATE_BUILD_STATUS_READY);
  const v1::SandboxTemplate t = Get("alice", "tpl");
  ASSERT_THAT(t.builds(), SizeIs(2));
  EXPECT_THAT(t.builds(0).tags(), IsEmpty());  // moved to the newer one
  EXPECT_THAT(t.builds(1).tags(), ElementsAre("default"));
  EXPECT_NE(first.template_key(), second.template_key());
}

TEST_F(SandboxTemplatesTest, ARestartFailsTheBuildsItInterruptedAndKeepsTheRest) {
  const v1::TemplateBuild ready = Built("alice", "kept");
  const v1::TemplateBuild running = Built("alice", "running");
  // The journal as a scheduler that stopped during that build left it: BUILDING.
  v1::SandboxTemplate& row = log_.rows.at(Get("alice", "running").template_id());
  row.mutable_builds(0)->set_status(v1::TEMPLATE_BUILD_STATUS_BUILDING);
  Restart();
  EXPECT_EQ(Get("alice", "kept").builds(0).status(), v1::TEMPLATE_BUILD_STATUS_READY);
  const v1::TemplateBuild interrupted = Get("alice", "running").builds(0);
  EXPECT_EQ(interrupted.status(), v1::TEMPLATE_BUILD_STATUS_FAILED);
  EXPECT_THAT(interrupted.error(), HasSubstr("interrupted"));
}

TEST_F(SandboxTemplatesTest, FilesAreKeptByHashForTheirOwnerOldestDroppedFirst) {
  auto put = [&](const std::string& hash, std::string content) {
    v1::TemplateFile f;
    f.set_owner("alice");
    f.set_hash(hash);
    f.set_content(std::move(content));
    return Await(templates_->PutFile(std::move(f)));
  };
  auto get = [&](const std::string& owner, const std::string& hash, bool content) {
    v1::GetTemplateFileRequest r;
    r.set_owner(owner);
    r.set_hash(hash);
    r.set_content(content);
    return templates_->GetFile(r);
  };
  ASSERT_THAT(put("aaa", "first"), IsOk());
  EXPECT_EQ(get("alice", "aaa", true)->content(), "first");
  EXPECT_EQ(get("alice", "aaa", false)->size_bytes(), 5u);
  EXPECT_TRUE(get("alice", "aaa", false)->content().empty());
  EXPECT_THAT(get("bob", "aaa", true), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(put("bad/hash", "x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(put("big", std::string((3 << 20) + 1, 'x')), StatusIs(absl::StatusCode::kInvalidArgument));

  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(put("bbb", "second"), IsOk());
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(put("ccc", "third"), IsOk());  // max_files 2: "aaa" goes
  EXPECT_THAT(get("alice", "aaa", false), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(log_.files.contains({"alice", "aaa"}));
  Restart();
  EXPECT_EQ(get("alice", "ccc", true)->content(), "third");
}

}  // namespace
}  // namespace corral::scheduler
