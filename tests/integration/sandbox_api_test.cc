// SandboxFusion's /run_code requests, as verl sends them, run by the code runner in a real sandbox of a real
// corral-sandbox-host: python with stdin, bash, C++ compiled then run, Node, a compile error, a time limit, a
// memory limit, files in and out, and a language nothing here provides.
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "services/sandbox_api/code_runner.h"
#include "services/sandbox_host/client/host_client.h"
#include "tests/integration/sandbox_host_fixture.h"
#include "tests/support/io_thread.h"

namespace corral {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

class RunCodeInASandboxTest : public SandboxHostApiTest {
 protected:
  void SetUp() override {
    SandboxHostApiTest::SetUp();
    if (IsSkipped()) return;
    auto created = Create(1);
    ASSERT_THAT(created, IsOk());
    sandbox_ = created->sandboxes(0).sandbox().sandbox_id();
    host_ = std::make_unique<sandbox::HostClient>(service_->ready.grpc, *MakeChannel(service_->ready.grpc), token_);
  }

  // The answer to `body` (which must parse), as JSON.
  json::object Answer(const std::string& body) {
    auto parsed = sandbox_api::ParseRunCode(body);
    EXPECT_TRUE(std::holds_alternative<sandbox_api::RunCodeRequest>(parsed)) << body;
    if (!std::holds_alternative<sandbox_api::RunCodeRequest>(parsed)) return {};
    const std::string answer = io_.RunSync(sandbox_api::RunCode(
        *host_, sandbox_, std::get<sandbox_api::RunCodeRequest>(parsed), absl::Now() + absl::Seconds(60), "it"));
    return json::parse(answer).as_object();
  }

  testing::IoThread io_;
  std::string sandbox_;
  std::unique_ptr<sandbox::HostClient> host_;
};

TEST_F(RunCodeInASandboxTest, VerlsPythonPayloadReadsItsStdin) {
  const json::object a = Answer(R"j({"compile_timeout": 10, "run_timeout": 10, "code": "print(int(input()) * 2)",
      "stdin": "21", "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []})j");
  EXPECT_EQ(a.at("status"), "Success") << json::serialize(a);
  EXPECT_TRUE(a.at("compile_result").is_null());
  EXPECT_EQ(a.at("run_result").at("status"), "Finished");
  EXPECT_EQ(a.at("run_result").at("stdout"), "42\n");
  EXPECT_EQ(a.at("run_result").at("stderr"), "");
  EXPECT_EQ(a.at("run_result").at("return_code"), 0);
  EXPECT_GT(a.at("run_result").at("execution_time").as_double(), 0);
  EXPECT_EQ(a.at("executor_pod_name"), "it");
}

TEST_F(RunCodeInASandboxTest, StdoutAndStderrComeBackApartAndAnExitCodeFails) {
  const json::object a = Answer(R"j({"code": "echo out; echo err >&2; exit 3", "language": "bash", "stdin": null})j");
  EXPECT_EQ(a.at("status"), "Failed");
  EXPECT_EQ(a.at("run_result").at("stdout"), "out\n");
  EXPECT_EQ(a.at("run_result").at("stderr"), "err\n");
  EXPECT_EQ(a.at("run_result").at("return_code"), 3);
}

TEST_F(RunCodeInASandboxTest, CppIsCompiledThenRunAndACompileErrorIsFailedWithoutARun) {
  json::object a = Answer(
      R"j({"code": "#include <cstdio>\nint main(){int n; std::scanf(\"%d\", &n); std::printf(\"%d\\n\", n + 1);}",
      "language": "cpp", "stdin": "41"})j");
  EXPECT_EQ(a.at("status"), "Success") << json::serialize(a);
  EXPECT_EQ(a.at("compile_result").at("status"), "Finished");
  EXPECT_EQ(a.at("compile_result").at("return_code"), 0);
  EXPECT_EQ(a.at("run_result").at("stdout"), "42\n");
  a = Answer(R"j({"code": "int main() { return undeclared; }", "language": "cpp"})j");
  EXPECT_EQ(a.at("status"), "Failed");
  EXPECT_NE(a.at("compile_result").at("return_code"), 0);
  EXPECT_THAT(std::string(a.at("compile_result").at("stderr").as_string()), HasSubstr("undeclared"));
  EXPECT_TRUE(a.at("run_result").is_null());
}

TEST_F(RunCodeInASandboxTest, NodeRuns) {
  const json::object a =
      Answer(R"j({"code": "console.log([1, 2, 3].map(x => x * 2).join(','))", "language": "nodejs"})j");
  EXPECT_EQ(a.at("status"), "Success") << json::serialize(a);
  EXPECT_EQ(a.at("run_result").at("stdout"), "2,4,6\n");
}

TEST_F(RunCodeInASandboxTest, ARunPastItsTimeoutIsATimeLimitWithTheOutputSoFar) {
  const json::object a = Answer(R"j({"code": "import time\nprint('started', flush=True)\ntime.sleep(30)",
      "language": "python", "run_timeout": 1})j");
  EXPECT_EQ(a.at("status"), "Failed");
  EXPECT_EQ(a.at("run_result").at("status"), "TimeLimitExceeded");
  EXPECT_TRUE(a.at("run_result").at("return_code").is_null());
  EXPECT_EQ(a.at("run_result").at("stdout"), "started\n");
  EXPECT_LT(a.at("run_result").at("execution_time").as_double(), 10);
}

TEST_F(RunCodeInASandboxTest, TheMemoryLimitHoldsTheCode) {
  const json::object a = Answer(R"j({"code": "x = bytearray(512 * 1024 * 1024)\nprint('allocated')",
      "language": "python", "memory_limit_MB": 128})j");
  EXPECT_EQ(a.at("status"), "Failed") << json::serialize(a);
  EXPECT_EQ(a.at("run_result").at("stdout"), "");
  EXPECT_THAT(std::string(a.at("run_result").at("stderr").as_string()), HasSubstr("MemoryError"));
}

TEST_F(RunCodeInASandboxTest, FilesGoInAndTheFilesAskedForComeBack) {
  const json::object a =
      Answer(R"j({"code": "import os\nopen('out/result.txt', 'w').write(open('data/in.txt').read().upper())",
      "language": "python", "files": {"data/in.txt": "aGVsbG8=", "out/keep": ""},
      "fetch_files": ["out/result.txt", "out/missing.txt"]})j");
  EXPECT_EQ(a.at("status"), "Success") << json::serialize(a);
  EXPECT_EQ(a.at("files").as_object().size(), 1u);
  EXPECT_EQ(a.at("files").at("out/result.txt"), "SEVMTE8=");  // "HELLO"
}

TEST_F(RunCodeInASandboxTest, ALanguageWithoutAToolchainIsASandboxErrorSayingWhy) {
  json::object a = Answer(R"j({"code": "select 1", "language": "sql"})j");
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_THAT(std::string(a.at("message").as_string()), HasSubstr("'sql' has no toolchain"));
  EXPECT_TRUE(a.at("run_result").is_null());
  // A toolchain whose program this host lacks: Julia is not in Debian.
  a = Answer(R"j({"code": "println(1)", "language": "julia"})j");
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_THAT(std::string(a.at("message").as_string()), HasSubstr("needs julia, not found in the sandbox"));
}

}  // namespace
}  // namespace corral
