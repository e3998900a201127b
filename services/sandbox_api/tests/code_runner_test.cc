// The code runner against the scheduler's in-memory host: what it asks the host for, and a host that fails it.
// (tests/integration/sandbox_api_test.cc runs real code in a real sandbox.)
#include "services/sandbox_api/code_runner.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "services/scheduler/testing/fake_host.h"
#include "tests/support/io_thread.h"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

class CodeRunnerTest : public ::testing::Test {
 protected:
  json::object Run(const std::string& sandbox_id, RunCodeRequest request) {
    return json::parse(io_.RunSync(RunCode(host_, sandbox_id, std::move(request), absl::InfiniteFuture()))).as_object();
  }
  std::string Sandbox() {
    auto created = io_.RunSync(host_.Create(v1::SandboxSpec(), {}));
    EXPECT_TRUE(created.ok());
    return created.ok() ? created->sandbox().sandbox_id() : "";
  }

  testing::IoThread io_;
  FakeClock clock_;
  scheduler::testing_support::FakeHost host_{"host-a:1", &clock_};
};

TEST_F(CodeRunnerTest, TheCodeAndStdinGoToTheHostWithTheTimeoutAndTheStreamsComeBackApart) {
  const std::string id = Sandbox();
  host_.OnExec([this](const std::string& sandbox, const v1::ExecRequest& r) {
    scheduler::ExecOutcome out;
    out.exited = true;
    if (r.command().argv(r.command().argv_size() - 1) == "main.py") {  // the run, not the lookup
      host_.WriteSandboxFile(sandbox, "code/.corral-stdout", "42\n");
      host_.WriteSandboxFile(sandbox, "code/.corral-stderr", "warning\n");
    }
    return out;
  });
  RunCodeRequest r;
  r.language = "python";
  r.code = "print(int(input()) * 2)";
  r.stdin_text = "21";
  r.run_timeout = 2.5;
  const json::object a = Run(id, r);
  EXPECT_EQ(a.at("status"), "Success") << json::serialize(a);
  EXPECT_EQ(a.at("run_result").at("stdout"), "42\n");
  EXPECT_EQ(a.at("run_result").at("stderr"), "warning\n");
  EXPECT_EQ(host_.SandboxFile(id, "code/main.py"), "print(int(input()) * 2)");
  const std::vector<v1::ExecRequest> execs = host_.execs();
  ASSERT_EQ(execs.size(), 2u) << "the programs looked up, then the run";
  EXPECT_THAT(execs[0].command().argv(2), HasSubstr("command -v"));
  EXPECT_EQ(execs[1].stdin(), "21");
  EXPECT_EQ(execs[1].command().cwd(), "code");
  EXPECT_EQ(execs[1].command().timeout().seconds(), 2);
  EXPECT_EQ(execs[1].command().timeout().nanos(), 500'000'000);
}

TEST_F(CodeRunnerTest, AHostThatFailsIsASandboxErrorSayingWhat) {
  RunCodeRequest r;
  r.language = "bash";
  r.code = "true";
  json::object a = Run("gone", r);  // a sandbox the host does not know
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_THAT(std::string(a.at("message").as_string()), HasSubstr("writing the code"));
  const std::string id = Sandbox();
  host_.OnExec([](const std::string&, const v1::ExecRequest&) {
    scheduler::ExecOutcome out;
    out.exited = true;
    out.exit.set_exit_code(127);  // the lookup: no bash here
    return out;
  });
  a = Run(id, r);
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_THAT(std::string(a.at("message").as_string()), HasSubstr("needs bash, not found"));
}

}  // namespace
}  // namespace corral::sandbox_api
