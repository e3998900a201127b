// The code runner against the scheduler's in-memory host: what it asks the host for, and a host that fails it.
// (tests/integration/sandbox_api_test.cc runs real code in a real sandbox.)
#include "services/sandbox_api/code_runner.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "services/sandbox_host/client/testing/fake_host.h"
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
  sandbox::FakeHost host_{"host-a:1", &clock_};
};

TEST_F(CodeRunnerTest, TheCodeAndStdinGoToTheHostWithTheTimeoutAndTheStreamsComeBackApart) {
  const std::string id = Sandbox();
  host_.OnExec([](const std::string&, const v1::ExecRequest&) {
    sandbox::ExecOutcome out;
    out.exited = true;
    out.stdout_head = "42\n";
    out.stderr_head = "warning\n";
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
  ASSERT_EQ(execs.size(), 1u) << "one process: the programs looked up, then the run";
  const auto& argv = execs[0].command().argv();
  EXPECT_THAT(argv[2], HasSubstr("command -v"));
  EXPECT_THAT(std::vector<std::string>(argv.begin() + 3, argv.end()),
              ::testing::ElementsAre("sh", "python3", "python3", "main.py"));
  EXPECT_EQ(execs[0].stdin(), "21");
  EXPECT_EQ(execs[0].command().cwd(), "code");
  EXPECT_EQ(execs[0].command().timeout().seconds(), 2);
  EXPECT_EQ(execs[0].command().timeout().nanos(), 500'000'000);
}

TEST_F(CodeRunnerTest, AHostThatFailsIsASandboxErrorSayingWhat) {
  RunCodeRequest r;
  r.language = "bash";
  r.code = "true";
  json::object a = Run("gone", r);  // a sandbox the host does not know
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_THAT(std::string(a.at("message").as_string()), HasSubstr("writing the code"));
  const std::string id = Sandbox();
  // The code's own exit 127 with a made-up marker is the code's failure...
  host_.OnExec([](const std::string&, const v1::ExecRequest&) {
    sandbox::ExecOutcome out;
    out.exited = true;
    out.exit.set_exit_code(127);
    out.stderr_head = "corral-missing-0000000000000000:bash\n";
    return out;
  });
  a = Run(id, r);
  EXPECT_EQ(a.at("status"), "Failed") << json::serialize(a);
  // ...while the shell's lookup failing, with the run's own marker, is the sandbox's lack.
  host_.OnExec([](const std::string&, const v1::ExecRequest& request) {
    const std::string& script = request.command().argv(2);
    const size_t at = script.find("corral-missing-");
    sandbox::ExecOutcome out;
    out.exited = true;
    out.exit.set_exit_code(127);
    out.stderr_head = script.substr(at, script.find(':', at) + 1 - at) + "bash\n";
    return out;
  });
  a = Run(id, r);
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_THAT(std::string(a.at("message").as_string()), HasSubstr("needs bash, not found"));
}

}  // namespace
}  // namespace corral::sandbox_api
