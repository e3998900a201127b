#include "libs/core/config.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "yaml-cpp/yaml.h"

namespace corral {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct TestConfig {
  std::string listen = "127.0.0.1:7000";
  bool insecure = false;
  int64_t capacity = 16;
  double ratio = 0.5;
  absl::Duration grace = absl::Seconds(10);
  std::vector<std::string> upstreams = {"http://a"};
  std::string tls_cert;
  std::vector<int> limits;
};

class ConfigTest : public ::testing::Test {
 protected:
  ConfigTest() : schema_("corral-test", "A test service.") {
    schema_.String("grpc_listen", &config_.listen, "gRPC address");
    schema_.Bool("insecure", &config_.insecure, "run without a secret");
    schema_.Int("capacity", &config_.capacity, "sandboxes", 1, 1000);
    schema_.Double("ratio", &config_.ratio, "a fraction", 0, 1);
    schema_.Duration("shutdown_grace", &config_.grace, "drain time", absl::ZeroDuration(), absl::Minutes(10));
    schema_.StringList("upstream", &config_.upstreams, "backends");
    schema_.String("tls.cert_file", &config_.tls_cert, "certificate");
    schema_.Custom("limits", "LIST", "[]", "permit counts", [this](const YAML::Node& node) {
      if (!node.IsSequence()) return absl::InvalidArgumentError("limits must be a list of integers");
      for (const auto& item : node) config_.limits.push_back(item.as<int>());
      return absl::OkStatus();
    });
  }

  std::string WriteFile(const std::string& text) {
    std::string path = ::testing::TempDir() + "/config_test_" +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".yaml";
    std::ofstream(path) << text;
    return path;
  }

  absl::StatusOr<CommandLine> Load(std::vector<std::string> args) {
    std::vector<const char*> argv = {"corral-test"};
    for (const auto& a : args) argv.push_back(a.c_str());
    return LoadConfig(schema_, static_cast<int>(argv.size()), argv.data());
  }

  TestConfig config_;
  ConfigSchema schema_;
};

TEST_F(ConfigTest, FileThenFlagsOverrideSingleKeys) {
  std::string path = WriteFile(
      "grpc_listen: 0.0.0.0:9000\ncapacity: 64\nshutdown_grace: 30s\nupstream: [http://x, http://y]\n"
      "tls:\n  cert_file: /etc/cert.pem\nlimits: [1, 2]\n");
  ASSERT_THAT(Load({"--capacity=128", "--config", path, "--insecure", "--upstream", "http://z"}), IsOk());
  EXPECT_EQ(config_.listen, "0.0.0.0:9000");
  EXPECT_EQ(config_.capacity, 128);
  EXPECT_TRUE(config_.insecure);
  EXPECT_EQ(config_.grace, absl::Seconds(30));
  EXPECT_EQ(config_.tls_cert, "/etc/cert.pem");
  EXPECT_THAT(config_.upstreams, ElementsAre("http://z"));
  EXPECT_THAT(config_.limits, ElementsAre(1, 2));
  EXPECT_DOUBLE_EQ(config_.ratio, 0.5);
}

TEST_F(ConfigTest, NestedKeyAsFlagAndRepeatedListFlag) {
  ASSERT_THAT(Load({"--tls-cert-file", "/c.pem", "--upstream=http://1", "--upstream=http://2", "--limits", "[7]"}),
              IsOk());
  EXPECT_EQ(config_.tls_cert, "/c.pem");
  EXPECT_THAT(config_.upstreams, ElementsAre("http://1", "http://2"));
  EXPECT_THAT(config_.limits, ElementsAre(7));
}

TEST_F(ConfigTest, UnknownKeyNamesKeyFileAndLine) {
  std::string path = WriteFile("capacity: 4\n\ngrpc_lsten: 0.0.0.0:1\n");
  EXPECT_THAT(Load({"--config", path}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 AllOf(HasSubstr(path + ":3:"), HasSubstr("unknown key 'grpc_lsten'"),
                                                       HasSubstr("grpc_listen"))));
}

TEST_F(ConfigTest, UnknownNestedKeyIsReportedWithItsPath) {
  std::string path = WriteFile("tls:\n  cert_fil: x\n");
  EXPECT_THAT(Load({"--config", path}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path + ":2:"), HasSubstr("unknown key 'tls.cert_fil'"))));
}

TEST_F(ConfigTest, WrongTypeNamesKeyAndValue) {
  std::string path = WriteFile("grpc_listen: x\ncapacity: lots\n");
  EXPECT_THAT(Load({"--config", path}),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr(path + ":2:"), HasSubstr("key 'capacity'"),
                                                                 HasSubstr("expected an integer, got 'lots'"))));
  std::string list = WriteFile("upstream: http://single\n");
  EXPECT_THAT(Load({"--config", list}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 AllOf(HasSubstr("key 'upstream'"), HasSubstr("expected a list"))));
  std::string map = WriteFile("capacity: {a: 1}\n");
  EXPECT_THAT(Load({"--config", map}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got a mapping")));
}

TEST_F(ConfigTest, OutOfRangeValuesAreRejectedFromFileAndFlag) {
  std::string path = WriteFile("capacity: 0\n");
  EXPECT_THAT(Load({"--config", path}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path + ":1:"), HasSubstr("0 is out of range; allowed: 1 to 1000"))));
  EXPECT_THAT(Load({"--ratio=1.5"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                              AllOf(HasSubstr("flag --ratio"), HasSubstr("out of range"))));
  EXPECT_THAT(Load({"--shutdown-grace=1h"}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")));
  EXPECT_THAT(Load({"--shutdown-grace=10"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a duration")));
  EXPECT_THAT(Load({"--insecure=maybe"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected true or false")));
  EXPECT_EQ(config_.capacity, 16);
}

TEST_F(ConfigTest, BadFilesAreClearErrors) {
  EXPECT_THAT(Load({"--config", "/nonexistent/corral.yaml"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/corral.yaml")));
  std::string broken = WriteFile("capacity: [1, 2\n");
  EXPECT_THAT(Load({"--config", broken}),
              StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr(broken), HasSubstr("invalid YAML"))));
  std::string scalar = WriteFile("just a string\n");
  EXPECT_THAT(Load({"--config", scalar}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top level must be a mapping")));
  std::string empty = WriteFile("");
  EXPECT_THAT(Load({"--config", empty}), IsOk());
  EXPECT_EQ(config_.capacity, 16);
}

TEST_F(ConfigTest, CustomParserErrorsAndYamlExceptionsCarryTheLocation) {
  std::string path = WriteFile("limits: 5\n");
  EXPECT_THAT(Load({"--config", path}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path + ":1: key 'limits'"), HasSubstr("must be a list"))));
  std::string bad_item = WriteFile("limits: [x]\n");
  EXPECT_THAT(Load({"--config", bad_item}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad_item)));
}

TEST_F(ConfigTest, UnknownFlagsMissingValuesAndPositionalsAreRejected) {
  EXPECT_THAT(Load({"--capacty=4"}), StatusIs(absl::StatusCode::kInvalidArgument,
                                              AllOf(HasSubstr("unknown flag --capacty"), HasSubstr("--help"))));
  EXPECT_THAT(Load({"--capacity"}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a value")));
  EXPECT_THAT(Load({"stray"}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected argument 'stray'")));
}

TEST_F(ConfigTest, HelpListsEveryKeyWithDefault) {
  auto cmd = Load({"--help"});
  ASSERT_THAT(cmd, IsOk());
  EXPECT_TRUE(cmd->help);
  std::string help = schema_.Help();
  EXPECT_THAT(help, HasSubstr("--grpc-listen STRING   (key grpc_listen, default \"127.0.0.1:7000\")"));
  EXPECT_THAT(help, HasSubstr("--capacity INT [1..1000]   (key capacity, default 16)"));
  EXPECT_THAT(help, HasSubstr("--shutdown-grace"));
  EXPECT_THAT(help, HasSubstr("default 10s"));
  EXPECT_THAT(help, HasSubstr("--tls-cert-file"));
  EXPECT_THAT(help, HasSubstr("default [\"http://a\"]"));
}

}  // namespace
}  // namespace corral
