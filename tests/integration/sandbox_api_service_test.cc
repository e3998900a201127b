// corral-sandbox-api in a real cluster (scheduler, ratelimiter, sandbox host as root), called by real clients:
// the real e2b SDK (tests/e2b, pinned) runs tests/e2b/sdk_test.mjs unchanged against its E2B API with a key from
// `corral sandbox-api key`; and exactly as verl calls SandboxFusion, tests/sandbox_api/verl_client.py sends verl's
// payload with urllib. Python, bash and C++
// run in leased sandboxes; a time limit, a compile error, stdin and files behave as verl reads them; four times
// the code limit of callers never run more than the limit at once; bad input is refused and leaves nothing.
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "libs/http/prometheus_text.h"
#include "tests/integration/scheduler_fixture.h"

namespace corral {
namespace {

using ::testing::HasSubstr;
namespace json = boost::json;

constexpr int kPermits = 2;

class SandboxApiServiceTest : public SchedulerFixture {
 protected:
  void SetUp() override {
    SchedulerFixture::SetUp();
    code_exec_permits_ = kPermits;
    ASSERT_NO_FATAL_FAILURE(StartCluster(/*hosts=*/1, /*capacity=*/12, {"--warm-pool-size=2"}));
    auto api =
        testing::StartService(CORRAL_SANDBOX_API,
                              {"--secret-file=" + secret_, "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                               "--http-listen=127.0.0.1:0", "--scheduler=" + scheduler_->ready.grpc,
                               "--ratelimiter=" + limiter_->ready.grpc, "--wait=60s"},
                              dir_, "sandbox-api");
    ASSERT_THAT(api, IsOk());
    api_.emplace(*std::move(api));
    url_ = "http://" + api_->ready.http + "/run_code";
  }
  void TearDown() override {
    if (api_) Stop(*api_);
    SchedulerFixture::TearDown();
  }

  // Runs verl_client.py with `args`; one parsed line per call.
  std::vector<json::object> Verl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     std::string(CORRAL_SOURCE_DIR) + "/tests/sandbox_api/verl_client.py", url_};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = absl::StrCat(dir_, "/verl-", ++calls_, ".out");
    auto client = Subprocess::Start(argv, log);
    EXPECT_THAT(client, IsOk());
    if (!client.ok()) return {};
    auto status = client->Wait(absl::Seconds(240));
    EXPECT_TRUE(status.ok() && *status == 0) << client->Log();
    std::vector<json::object> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      boost::system::error_code ec;
      json::value v = json::parse(line, ec);
      if (!ec && v.is_object()) out.push_back(v.as_object());
    }
    return out;
  }
  json::object One(const std::vector<std::string>& args) {
    auto all = Verl(args);
    EXPECT_EQ(all.size(), 1u);
    return all.empty() ? json::object() : all[0];
  }
  static std::string Str(const json::value& v) { return v.is_string() ? std::string(v.as_string()) : ""; }
  static const json::object& Result(const json::object& call, const char* which) {
    static const json::object kNone;
    const json::value* body = call.if_contains("body");
    if (body == nullptr || !body->is_object()) return kNone;
    const json::value* r = body->as_object().if_contains(which);
    return r != nullptr && r->is_object() ? r->as_object() : kNone;
  }
  static std::string Status(const json::object& call) {
    const json::value* body = call.if_contains("body");
    return body != nullptr && body->is_object() ? Str(body->as_object().at("status")) : "";
  }
  int Leases() {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListLeasesRequest request;
    v1::ListLeasesResponse response;
    if (!scheduler_stub_->ListLeases(&ctx, request, &response).ok()) return -1;
    return response.leases_size();
  }

  std::optional<testing::RunningService> api_;
  std::string url_;
  int calls_ = 0;
};

// Every step of sdk_test.mjs with the SDK unchanged (only its URLs and a key are set): commands, processes
// (list, connect, kill), watch, what an adversary tries (forged tokens, another sandbox's token, another key,
// paths out of the sandbox), files, fork, timeout, the code interpreter (@e2b/code-interpreter) and errors. A sandbox
// never killed (the timeout step) is gone once its timeout passes; none is left.
TEST_F(SandboxApiServiceTest, TheE2bSdkRunsCommandsFilesForksAndTimeoutsUnchanged) {
  auto mint = [&](const std::string& name) {
    const std::string log = absl::StrCat(dir_, "/key-", name, ".out");
    auto cli = Subprocess::Start({CORRAL_CLI, "sandbox-api", "key", name, "--secret-file=" + secret_}, log);
    EXPECT_THAT(cli, IsOk());
    auto exit = cli.ok() ? cli->Wait(absl::Seconds(30)) : absl::StatusOr<int>(cli.status());
    EXPECT_TRUE(exit.ok() && *exit == 0) << (cli.ok() ? cli->Log() : "");
    std::string key;
    std::getline(std::ifstream(log), key);
    return key;
  };
  const std::string key = mint("sdk-test"), other = mint("someone-else");
  ASSERT_FALSE(key.empty() || other.empty());

  const std::string url = "http://" + api_->ready.http;
  const std::string log = absl::StrCat(dir_, "/e2b-sdk.out");
  auto sdk =
      // E2B_USER_AGENT_SOURCE=ci: the SDKs put the answer's body in their errors (and ?source=ci in URLs).
      Subprocess::Start({"/usr/bin/env", "E2B_API_KEY=" + key, "E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url,
                         "E2B_OTHER_KEY=" + other, "E2B_USER_AGENT_SOURCE=ci", "node",
                         std::string(CORRAL_SOURCE_DIR) + "/tests/e2b/sdk_test.mjs"},
                        log);
  ASSERT_THAT(sdk, IsOk());
  auto status = sdk->Wait(absl::Seconds(240));
  const std::string out = sdk->Log();
  EXPECT_TRUE(status.ok() && *status == 0) << out;
  for (const char* step : {"ok commands", "ok processes", "ok watch", "ok adversary", "ok files", "ok fork",
                           "ok forkRunning", "ok timeout", "ok code", "ok lifecycle", "ok errors"}) {
    EXPECT_THAT(out, HasSubstr(step));
  }
  EXPECT_TRUE(testing::WaitUntil([&] { return Leases() == 0; }, absl::Seconds(30))) << Leases() << " leases left";
  // The service counted the E2B calls by kind, and no process it started still runs.
  auto text = http::HttpGet(api_->ready.metrics, "/metrics");
  ASSERT_THAT(text, IsOk());
  auto metrics = http::ParsePrometheusText(*text);
  ASSERT_THAT(metrics, IsOk());
  EXPECT_THAT(metrics->Value("corral_sandbox_api_e2b_processes", {}), IsOkAndHolds(0.0));
  for (const char* route : {"envd_stream", "envd_rpc", "envd_files"}) {
    auto n = metrics->Value("corral_sandbox_api_requests_total", {{"route", route}, {"code", "200"}});
    EXPECT_TRUE(n.ok() && *n > 0) << route;
  }
  auto created = metrics->Value("corral_sandbox_api_requests_total", {{"route", "e2b"}, {"code", "201"}});
  EXPECT_TRUE(created.ok() && *created >= 8) << "creates and forks";
}

TEST_F(SandboxApiServiceTest, VerlPayloadsRunPythonBashAndCppWithStdinTimeLimitsAndFiles) {
  json::object py = One({"--code", "print(int(input()) * 2)", "--stdin", "21"});
  EXPECT_EQ(py.at("http").as_int64(), 200) << json::serialize(py);
  EXPECT_EQ(Status(py), "Success") << json::serialize(py);
  EXPECT_EQ(Str(Result(py, "run_result").at("stdout")), "42\n");
  EXPECT_EQ(Str(Result(py, "run_result").at("stderr")), "");
  EXPECT_TRUE(py.at("body").as_object().at("compile_result").is_null());

  json::object sh = One({"--language", "bash", "--code", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(Status(sh), "Failed") << json::serialize(sh);
  EXPECT_EQ(Result(sh, "run_result").at("return_code").as_int64(), 3);
  EXPECT_EQ(Str(Result(sh, "run_result").at("stdout")), "out\n");
  EXPECT_EQ(Str(Result(sh, "run_result").at("stderr")), "err\n");

  json::object cpp = One({"--language", "cpp", "--code",
                          "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}",
                          "--stdin", "2 3", "--timeout", "30"});
  EXPECT_EQ(Status(cpp), "Success") << json::serialize(cpp);
  EXPECT_EQ(Str(Result(cpp, "compile_result").at("status")), "Finished");
  EXPECT_EQ(Str(Result(cpp, "run_result").at("stdout")), "5\n");

  json::object broken = One({"--language", "cpp", "--code", "int main( {", "--timeout", "30"});
  EXPECT_EQ(Status(broken), "Failed") << json::serialize(broken);
  EXPECT_NE(Result(broken, "compile_result").at("return_code").as_int64(), 0);
  EXPECT_TRUE(broken.at("body").as_object().at("run_result").is_null());

  json::object slow = One({"--code", "import time\nprint('started', flush=True)\ntime.sleep(30)", "--timeout", "1"});
  EXPECT_EQ(Status(slow), "Failed") << json::serialize(slow);
  EXPECT_EQ(Str(Result(slow, "run_result").at("status")), "TimeLimitExceeded");
  EXPECT_TRUE(Result(slow, "run_result").at("return_code").is_null());
  EXPECT_LT(slow.at("seconds").to_number<double>(), 20);

  const std::string in = absl::Base64Escape("hello\n");
  json::object files =
      One({"--code", "data = open('data/in.txt').read()\nopen('out.txt', 'w').write(data.upper())\nprint(len(data))",
           "--files", absl::StrCat(R"({"data/in.txt": ")", in, R"(", "skip": null})"), "--fetch-files",
           R"(["out.txt", "missing.txt"])"});
  EXPECT_EQ(Status(files), "Success") << json::serialize(files);
  EXPECT_EQ(Str(Result(files, "run_result").at("stdout")), "6\n");
  const json::object& fetched = files.at("body").as_object().at("files").as_object();
  EXPECT_EQ(Str(fetched.at("out.txt")), absl::Base64Escape("HELLO\n"));
  EXPECT_FALSE(fetched.contains("missing.txt"));

  // Every call's sandbox is released: no lease is left behind.
  EXPECT_TRUE(testing::WaitUntil([&] { return Leases() == 0; }, absl::Seconds(30))) << Leases() << " leases left";
}

TEST_F(SandboxApiServiceTest, FourTimesTheLimitOfCallersNeverRunMoreThanTheLimitAtOnce) {
  // Each run prints when it began and ended (one machine, one clock); runs overlap at most kPermits deep.
  const auto calls = Verl({"--code", "import time\na = time.time()\ntime.sleep(1)\nprint(a, time.time())",
                           "--concurrency", absl::StrCat(4 * kPermits)});
  ASSERT_EQ(calls.size(), static_cast<size_t>(4 * kPermits));
  std::vector<std::pair<double, int>> edges;
  for (const json::object& call : calls) {
    ASSERT_EQ(Status(call), "Success") << json::serialize(call);
    std::vector<std::string> times = absl::StrSplit(Str(Result(call, "run_result").at("stdout")), ' ');
    ASSERT_EQ(times.size(), 2u);
    edges.push_back({std::stod(times[0]), +1});
    edges.push_back({std::stod(times[1]), -1});
  }
  std::sort(edges.begin(), edges.end());  // an end sorts before a start at the same instant
  int depth = 0, deepest = 0;
  for (const auto& [t, step] : edges) deepest = std::max(deepest, depth += step);
  EXPECT_LE(deepest, kPermits);
  EXPECT_GE(deepest, 1);
  EXPECT_TRUE(testing::WaitUntil([&] { return Leases() == 0; }, absl::Seconds(30)));
}

TEST_F(SandboxApiServiceTest, BadInputIsRefusedClearlyAndLeasesNothing) {
  std::ofstream(dir_ + "/garbage.json") << "{\"code\": \"print(1)\", \"language\": ";
  json::object garbage = One({"--raw-body", dir_ + "/garbage.json"});
  EXPECT_EQ(garbage.at("http").as_int64(), 422);
  EXPECT_THAT(json::serialize(garbage), HasSubstr("json_invalid"));

  json::object cobol = One({"--language", "cobol", "--code", "DISPLAY 'HI'."});
  EXPECT_EQ(cobol.at("http").as_int64(), 422);
  EXPECT_THAT(json::serialize(cobol), HasSubstr("literal_error"));

  json::object negative = One({"--code", "print(1)", "--timeout", "-1"});
  EXPECT_EQ(negative.at("http").as_int64(), 422);
  EXPECT_THAT(json::serialize(negative), HasSubstr("compile_timeout"));

  json::object huge = One({"--code-bytes", absl::StrCat(100 << 20)});
  EXPECT_EQ(huge.at("http").as_int64(), 413) << json::serialize(huge).substr(0, 300);

  json::object sql = One({"--language", "sql", "--code", "SELECT 1;"});
  EXPECT_EQ(sql.at("http").as_int64(), 200);
  EXPECT_EQ(Status(sql), "SandboxError");
  EXPECT_THAT(Str(sql.at("body").as_object().at("message")), HasSubstr("sql"));

  EXPECT_EQ(Leases(), 0);
  // The service still answers.
  EXPECT_EQ(Status(One({"--code", "print('still here')"})), "Success");
}

}  // namespace
}  // namespace corral
