// SandboxFusion's /run_code as verl sends it: its payloads parse, anything else is a 422 in FastAPI's words naming
// the field, and answers have SandboxFusion's exact shape and status rules.
#include "services/sandbox_api/run_code.h"

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

RunCodeRequest Parsed(const std::string& body) {
  auto r = ParseRunCode(body);
  EXPECT_TRUE(std::holds_alternative<RunCodeRequest>(r)) << std::get<RunCodeRefusal>(r).body;
  return std::holds_alternative<RunCodeRequest>(r) ? std::get<RunCodeRequest>(r) : RunCodeRequest{};
}

// The refusal's first detail, checked to be a 422.
json::object Refused(const std::string& body, const RunCodeLimits& limits = {}) {
  auto r = ParseRunCode(body, limits);
  EXPECT_TRUE(std::holds_alternative<RunCodeRefusal>(r)) << body;
  if (!std::holds_alternative<RunCodeRefusal>(r)) return {};
  EXPECT_EQ(std::get<RunCodeRefusal>(r).http_status, 422);
  return json::parse(std::get<RunCodeRefusal>(r).body).at("detail").at(0).as_object();
}

TEST(RunCodeTest, VerlsRewardAndToolPayloadsParse) {
  // utils.py's call_sandbox_api, as json.dumps writes it.
  RunCodeRequest r = Parsed(R"j({"compile_timeout": 10, "run_timeout": 10, "code": "print(input())", "stdin": "5",
                                "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []})j");
  EXPECT_EQ(r.code, "print(input())");
  EXPECT_EQ(r.language, "python");
  EXPECT_EQ(r.stdin_text, "5");
  EXPECT_EQ(r.compile_timeout, 10);
  EXPECT_EQ(r.run_timeout, 10);
  EXPECT_EQ(r.memory_limit_mb, 1024);
  // The tool's: no stdin, a float timeout; fields SandboxFusion does not know are ignored as it ignores them.
  r = Parsed(R"({"code": "echo hi", "language": "bash", "stdin": null, "run_timeout": 2.5, "extra": true})");
  EXPECT_FALSE(r.stdin_text.has_value());
  EXPECT_EQ(r.run_timeout, 2.5);
  EXPECT_EQ(r.compile_timeout, 10) << "the default";
  EXPECT_EQ(r.memory_limit_mb, -1);
}

TEST(RunCodeTest, FilesAreDecodedAndWhatSandboxFusionSkipsIsSkipped) {
  RunCodeRequest r = Parsed(R"({"code": "", "language": "python", "files": {"data/in.txt": "aGVsbG8=",
      "skip": null, "x.IGNORE_THIS_FILE": "aGk="}, "fetch_files": ["out.txt", "data/res.bin"]})");
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].first, "data/in.txt");
  EXPECT_EQ(r.files[0].second, "hello");
  EXPECT_THAT(r.fetch_files, ::testing::ElementsAre("out.txt", "data/res.bin"));
}

TEST(RunCodeTest, WhatIsNotARequestIsA422NamingTheField) {
  json::object d = Refused("{\"code\": ");
  EXPECT_EQ(d.at("type"), "json_invalid");
  EXPECT_EQ(Refused("[1, 2]").at("type"), "model_attributes_type");
  d = Refused(R"({"code": "exit 1"})");
  EXPECT_EQ(d.at("type"), "missing");
  EXPECT_EQ(d.at("loc"), json::parse(R"(["body", "language"])"));
  d = Refused(R"({"code": "x", "language": "cobol"})");
  EXPECT_EQ(d.at("type"), "literal_error");
  EXPECT_THAT(std::string(d.at("msg").as_string()), HasSubstr("'python', 'cpp', 'nodejs'"));
  EXPECT_THAT(std::string(d.at("msg").as_string()), HasSubstr("or 'racket'"));
  EXPECT_EQ(Refused(R"({"code": 5, "language": "python"})").at("type"), "string_type");
  d = Refused(R"({"code": "x", "language": "python", "run_timeout": -1})");
  EXPECT_EQ(d.at("type"), "greater_than_equal");
  EXPECT_EQ(d.at("loc"), json::parse(R"(["body", "run_timeout"])"));
  EXPECT_EQ(Refused(R"({"code": "x", "language": "python", "compile_timeout": "10"})").at("type"), "float_type");
  EXPECT_EQ(Refused(R"({"code": "x", "language": "python", "run_timeout": 1e9})").at("type"), "less_than_equal");
  EXPECT_EQ(Refused(R"({"code": "x", "language": "python", "memory_limit_MB": -2})").at("type"), "greater_than_equal");
  EXPECT_EQ(Refused(R"({"code": "x", "language": "python", "memory_limit_MB": 1.5})").at("type"), "int_type");
  EXPECT_EQ(Refused(R"({"code": "x", "language": "python", "stdin": 3})").at("type"), "string_type");
  d = Refused(R"({"code": "x", "language": "python", "files": {"a.txt": "not base64!"}})");
  EXPECT_EQ(d.at("loc"), json::parse(R"(["body", "files", "a.txt"])"));
  EXPECT_THAT(std::string(d.at("msg").as_string()), HasSubstr("base64"));
  for (const char* path : {"../escape", "/etc/passwd", "a/../../b"}) {
    EXPECT_EQ(
        Refused(absl::StrCat(R"({"code": "x", "language": "python", "files": {")", path, R"(": "aGk="}})")).at("type"),
        "value_error")
        << path;
    EXPECT_EQ(
        Refused(absl::StrCat(R"({"code": "x", "language": "python", "fetch_files": [")", path, R"("]})")).at("type"),
        "value_error")
        << path;
  }
  EXPECT_EQ(Refused(R"({"code": "x", "language": "python", "fetch_files": "out.txt"})").at("type"), "list_type");
}

TEST(RunCodeTest, CodeAndFilesOverTheLimitsAreRefusedWithoutEchoingThemWhole) {
  RunCodeLimits limits;
  limits.max_code_bytes = 1000;
  limits.max_files_bytes = 4;
  const json::object d =
      Refused(absl::StrCat(R"({"language": "python", "code": ")", std::string(5000, 'x'), "\"}"), limits);
  EXPECT_EQ(d.at("type"), "string_too_long");
  EXPECT_LT(d.at("input").as_string().size(), 300u);
  EXPECT_EQ(Refused(R"({"code": "", "language": "python", "files": {"a": "aGVsbG8="}})", limits).at("type"),
            "value_error");
}

TEST(RunCodeTest, AnswersHaveSandboxFusionsShapeAndStatusRules) {
  CommandResult ok{CommandResult::Status::kFinished, 0.25, 0, "Hello, world!\n", ""};
  EXPECT_EQ(RunCodeAnswer(std::nullopt, ok, {}),
            R"({"status":"Success","message":"","compile_result":null,"run_result":{"status":"Finished",)"
            R"("execution_time":2.5E-1,"return_code":0,"stdout":"Hello, world!\n","stderr":""},)"
            R"("executor_pod_name":null,"files":{}})");
  // A compile error: Failed, no run.
  CommandResult compile_error{CommandResult::Status::kFinished, 0.5, 1, "", "main.cpp:1: error"};
  json::object a = json::parse(RunCodeAnswer(compile_error, std::nullopt, {})).as_object();
  EXPECT_EQ(a.at("status"), "Failed");
  EXPECT_EQ(a.at("compile_result").at("return_code"), 1);
  EXPECT_TRUE(a.at("run_result").is_null());
  // A time limit: Failed, no return code, the output so far.
  CommandResult tle{CommandResult::Status::kTimeLimitExceeded, 2.0, std::nullopt, "partial", ""};
  a = json::parse(RunCodeAnswer(std::nullopt, tle, {})).as_object();
  EXPECT_EQ(a.at("status"), "Failed");
  EXPECT_EQ(a.at("run_result").at("status"), "TimeLimitExceeded");
  EXPECT_TRUE(a.at("run_result").at("return_code").is_null());
  EXPECT_EQ(a.at("run_result").at("stdout"), "partial");
  // A runtime error is Failed; a command that could not run is a SandboxError with its stderr as the message.
  EXPECT_EQ(
      json::parse(RunCodeAnswer(std::nullopt, CommandResult{CommandResult::Status::kFinished, 0.1, 3, "", "x"}, {}))
          .at("status"),
      "Failed");
  a = json::parse(RunCodeAnswer(std::nullopt,
                                CommandResult{CommandResult::Status::kError, 0, std::nullopt, "", "exec failed"}, {}))
          .as_object();
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_EQ(a.at("message"), "exec failed");
  EXPECT_TRUE(a.at("run_result").at("stdout").is_null());
  EXPECT_TRUE(a.at("run_result").at("execution_time").is_null());
  // Fetched files come back base64, under the path asked for.
  a = json::parse(RunCodeAnswer(std::nullopt, ok, {{"out.txt", "42\n"}}, "host-1")).as_object();
  EXPECT_EQ(a.at("files").at("out.txt"), "NDIK");
  EXPECT_EQ(a.at("executor_pod_name"), "host-1");
  a = json::parse(SandboxErrorAnswer("no sandbox")).as_object();
  EXPECT_EQ(a.at("status"), "SandboxError");
  EXPECT_TRUE(a.at("run_result").is_null());
  EXPECT_TRUE(a.at("files").as_object().empty());
}

TEST(RunCodeTest, EveryToolchainIsASandboxFusionLanguageAndTheOthersSayWhy) {
  for (const char* language : {"python", "bash", "cpp", "nodejs", "go", "java", "rust", "pytest"}) {
    const Toolchain* t = ToolchainFor(language);
    ASSERT_NE(t, nullptr) << language;
    EXPECT_FALSE(t->run.empty());
    EXPECT_FALSE(t->programs.empty());
    const auto languages = SandboxFusionLanguages();
    EXPECT_NE(std::find(languages.begin(), languages.end(), t->language), languages.end()) << language;
  }
  EXPECT_FALSE(ToolchainFor("cpp")->compile.empty());
  EXPECT_TRUE(ToolchainFor("python")->compile.empty());
  EXPECT_EQ(SandboxFusionLanguages().size(), 29u);
  EXPECT_EQ(ToolchainFor("sql"), nullptr);
  EXPECT_THAT(UnavailableMessage("sql", nullptr), HasSubstr("'sql' has no toolchain in Corral; it runs python"));
  EXPECT_THAT(UnavailableMessage("cpp", ToolchainFor("cpp")), HasSubstr("needs g++, not found"));
  EXPECT_THAT(UnavailableMessage("cpp", ToolchainFor("cpp")), HasSubstr("Debian's g++"));
}

}  // namespace
}  // namespace corral::sandbox_api
