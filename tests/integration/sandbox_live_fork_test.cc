// ForkSandbox carrying a running process, through the real corral-sandbox-host's API: a fork-ready interactive
// Python process (Command.fork_ready) holds state; each child of a fork lists its copy in
// CreatedSandbox.carried_processes, whose stream a client takes up with ExecInteractive `attach`; the copy has
// the parent's state and works in its child's files.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/sandbox_host_fixture.h"
#include "tests/support/carry_repl.h"

namespace corral {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SandboxLiveForkTest : public SandboxHostApiTest {
 protected:
  // An ExecInteractive stream, started (`start`) or taken up (`attach`) by `first`.
  struct Repl {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReaderWriter<v1::ExecInput, v1::ExecEvent>> stream;
    std::string process_id;
    std::string pending;

    std::string Ask(const std::string& line) {
      v1::ExecInput in;
      in.set_stdin(line + "\n");
      if (!stream->Write(in)) return "<closed>";
      v1::ExecEvent ev;
      while (pending.find('\n') == std::string::npos && stream->Read(&ev)) pending += ev.stdout() + ev.stderr();
      const size_t end = pending.find('\n');
      if (end == std::string::npos) return "<ended> " + pending;
      std::string answer = pending.substr(0, end);
      pending.erase(0, end + 1);
      return answer;
    }
  };
  Repl Open(const std::string& token, const v1::ExecInput& first) {
    Repl r;
    Prepare(*r.ctx, token);
    r.stream = stub_->ExecInteractive(r.ctx.get());
    EXPECT_TRUE(r.stream->Write(first));
    v1::ExecEvent ev;
    EXPECT_TRUE(r.stream->Read(&ev));
    EXPECT_TRUE(ev.has_started()) << ev.DebugString();
    r.process_id = ev.started().process_id();
    return r;
  }
};

TEST_F(SandboxLiveForkTest, AForkCarriesAForkReadyProcessIntoEveryChild) {
  auto created = Create(1);
  ASSERT_THAT(created, IsOk());
  const std::string id = created->sandboxes(0).sandbox().sandbox_id();
  const std::string token = created->sandboxes(0).capability_token();
  ASSERT_THAT(WriteFile(id, token, "repl.py", testing::kCarryRepl), IsOk());
  v1::ExecInput start;
  start.mutable_start()->set_sandbox_id(id);
  start.mutable_start()->mutable_command()->add_argv("python3");
  start.mutable_start()->mutable_command()->add_argv("repl.py");
  start.mutable_start()->mutable_command()->set_fork_ready(true);
  Repl parent = Open(token, start);
  ASSERT_EQ(parent.Ask("set x 42"), "ok");
  ASSERT_EQ(parent.Ask("write /workspace/note parent"), "ok");

  auto forked = Fork(id, 2, token_);
  ASSERT_THAT(forked, IsOk());
  EXPECT_THAT(forked->not_carried(), IsEmpty());
  ASSERT_EQ(forked->sandboxes_size(), 2);
  for (int k = 0; k < 2; ++k) {
    const v1::CreatedSandbox& child = forked->sandboxes(k);
    ASSERT_EQ(child.carried_processes_size(), 1);
    EXPECT_EQ(child.carried_processes(0).argv(0), "python3");
    v1::ExecInput attach;
    attach.mutable_attach()->set_sandbox_id(child.sandbox().sandbox_id());
    attach.mutable_attach()->set_process_id(child.carried_processes(0).process_id());
    Repl copy = Open(child.capability_token(), attach);
    EXPECT_EQ(copy.process_id, child.carried_processes(0).process_id());
    EXPECT_EQ(copy.Ask("get x"), "42");
    const std::string uid = std::to_string(child.sandbox().uid());
    EXPECT_EQ(copy.Ask("ids"), uid + " " + uid);
    EXPECT_EQ(copy.Ask("read /workspace/note"), "parent");
    EXPECT_EQ(copy.Ask("write /workspace/note child-" + std::to_string(k)), "ok");
    EXPECT_EQ(Exec(child.sandbox().sandbox_id(), child.capability_token(), "cat /workspace/note").out,
              "child-" + std::to_string(k));
    // One reader per process: a second attach is refused.
    grpc::ClientContext ctx;
    Prepare(ctx, child.capability_token());
    auto again = stub_->ExecInteractive(&ctx);
    again->Write(attach);
    again->WritesDone();
    v1::ExecEvent ev;
    EXPECT_FALSE(again->Read(&ev));
    EXPECT_THAT(FromGrpcStatus(again->Finish()),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already has a reader")));
  }
  EXPECT_EQ(parent.Ask("get x"), "42");
  EXPECT_EQ(parent.Ask("read /workspace/note"), "parent");
}

TEST_F(SandboxLiveForkTest, AttachNeedsTheSandboxsTokenAndARunningCarriedProcess) {
  auto created = Create(2);
  ASSERT_THAT(created, IsOk());
  const std::string id = created->sandboxes(0).sandbox().sandbox_id();
  for (const auto& [token, process, code] :
       {std::tuple{created->sandboxes(1).capability_token(), std::string("p-1"), absl::StatusCode::kPermissionDenied},
        std::tuple{created->sandboxes(0).capability_token(), std::string("p-999"), absl::StatusCode::kNotFound}}) {
    grpc::ClientContext ctx;
    Prepare(ctx, token);
    auto stream = stub_->ExecInteractive(&ctx);
    v1::ExecInput attach;
    attach.mutable_attach()->set_sandbox_id(id);
    attach.mutable_attach()->set_process_id(process);
    stream->Write(attach);
    stream->WritesDone();
    v1::ExecEvent ev;
    EXPECT_FALSE(stream->Read(&ev));
    EXPECT_EQ(FromGrpcStatus(stream->Finish()).code(), code) << process;
  }
}

}  // namespace
}  // namespace corral
