// An E2B build's steps as a Corral environment: each step a setup command in order, as the SDK serializes them;
// ENV carried and expanded; COPY unpacked from its upload; a bad or unsupported step refused by number; a host's
// failure told back as the step that failed.
#include "services/sandbox_api/e2b/template_steps.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

v1::TemplateBuild OnImage(const std::string& image) {
  v1::TemplateBuild base;
  base.mutable_environment()->set_image(image);
  return base;
}

absl::StatusOr<TemplatePlan> Plan(const std::string& body, const v1::TemplateBuild& base,
                                  const std::map<std::string, std::string>& files = {}) {
  return PlanTemplate(json::parse(body).as_object(), &base, files);
}

TEST(TemplateStepsTest, EachStepIsASetupCommandInOrderWithTheUserWorkdirAndEnvInForce) {
  auto plan = Plan(R"({"fromImage":"python:3.12","force":false,"startCmd":"serve","readyCmd":"[ -f /ok ]","steps":[
      {"type":"RUN","args":["apt-get install -y curl","root"],"force":false},
      {"type":"ENV","args":["A","1","PATH","/opt/bin:$PATH","B","${A}-x"],"force":false},
      {"type":"USER","args":["agent"]},
      {"type":"WORKDIR","args":["/srv/app"]},
      {"type":"RUN","args":["make"]},
      {"type":"COPY","args":["src","rel/","",""],"filesHash":"abc"}]})",
                   OnImage("python:3.12"), {{"abc", std::string("\x1f\x8b rest", 7)}});
  ASSERT_THAT(plan, IsOk());
  const v1::EnvironmentSpec& env = plan->environment;
  EXPECT_EQ(env.image(), "python:3.12");
  ASSERT_THAT(env.setup_commands(), SizeIs(5));  // RUN, WORKDIR's mkdir, RUN, COPY, the staging's removal
  const v1::Command& install = env.setup_commands(0);
  EXPECT_EQ(install.user(), "root");
  EXPECT_EQ(install.argv(4), "apt-get install -y curl");
  EXPECT_TRUE(install.env().empty());  // ENV came after it
  EXPECT_EQ(env.setup_commands(1).argv(4), "mkdir -p /srv/app");
  EXPECT_EQ(env.setup_commands(1).user(), "root");
  const v1::Command& make = env.setup_commands(2);
  EXPECT_EQ(make.user(), "agent");
  EXPECT_EQ(make.argv(4), "cd /srv/app && make");
  EXPECT_EQ(make.env().at("PATH"), "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  EXPECT_EQ(make.env().at("B"), "1-x");
  // COPY: the archive placed in the image's root, unpacked (gzip), owned by the USER in force, then copied.
  ASSERT_THAT(env.setup_files(), SizeIs(1));
  EXPECT_EQ(env.setup_files(0).path(), "/.corral-copy/0.tar");
  const std::string copy = env.setup_commands(3).argv(4);
  EXPECT_EQ(env.setup_commands(3).user(), "root");
  EXPECT_THAT(copy, HasSubstr("tar -xzof /.corral-copy/0.tar -C /.corral-copy/0"));
  EXPECT_THAT(copy, HasSubstr("chown -R agent: /.corral-copy/0"));
  EXPECT_THAT(copy, HasSubstr("cp -a /.corral-copy/0/src/. /srv/app/rel;"));
  EXPECT_EQ(env.setup_commands(4).argv(4), "rm -rf /.corral-copy");
  EXPECT_TRUE(env.env().empty());  // every sandbox of the template has them, as its own variables:
  EXPECT_EQ(plan->annotations.at(kEnvAnnotation),
            R"({"A":"1","B":"1-x","PATH":"/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})");
  EXPECT_EQ(plan->annotations.at(kStartCmdAnnotation), "serve");
  EXPECT_EQ(plan->annotations.at(kReadyCmdAnnotation), "[ -f /ok ]");
  EXPECT_EQ(plan->annotations.at(kUserAnnotation), "agent");
  EXPECT_EQ(plan->annotations.at(kWorkdirAnnotation), "/srv/app");
  EXPECT_EQ(plan->annotations.at(kStepsAnnotation), "1,4,5,6,0");
  EXPECT_THAT(plan->log_lines,
              ElementsAre("[1/6] RUN apt-get install -y curl (as root)", "[2/6] ENV A 1 PATH /opt/bin:$PATH B ${A}-x",
                          "[3/6] USER agent", "[4/6] WORKDIR /srv/app", "[5/6] RUN make", "[6/6] COPY src rel/"));
}

TEST(TemplateStepsTest, ForceMakesTheContentNewAndTheSameStepsMakeTheSameContent) {
  const std::string body = R"({"steps":[{"type":"RUN","args":["make"]}],"buildID":"b1"})";
  auto a = Plan(body, OnImage("img"));
  auto b = Plan(R"({"steps":[{"type":"RUN","args":["make"]}],"buildID":"b2"})", OnImage("img"));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->environment.SerializeAsString(), b->environment.SerializeAsString());
  auto forced = Plan(R"({"steps":[{"type":"RUN","args":["make"],"force":true}],"buildID":"b3"})", OnImage("img"));
  ASSERT_THAT(forced, IsOk());
  ASSERT_THAT(forced->environment.setup_commands(), SizeIs(2));
  EXPECT_THAT(forced->environment.setup_commands(1).argv(), ElementsAre("true", "rebuild-b3"));
}

TEST(TemplateStepsTest, ABuildOnATemplateAddsToItsSteps) {
  auto base = Plan(R"({"steps":[{"type":"ENV","args":["A","1"]},{"type":"RUN","args":["one"]}],"startCmd":"s"})",
                   OnImage("img"));
  ASSERT_THAT(base, IsOk());
  v1::TemplateBuild built;
  EXPECT_EQ(TemplateEnv(v1::TemplateBuild()).size(), 0u);
  *built.mutable_environment() = base->environment;
  built.mutable_annotations()->insert(base->annotations.begin(), base->annotations.end());
  auto plan = Plan(R"({"steps":[{"type":"RUN","args":["two $A"]}]})", built);
  ASSERT_THAT(plan, IsOk());
  ASSERT_THAT(plan->environment.setup_commands(), SizeIs(2));
  EXPECT_EQ(plan->environment.setup_commands(1).env().at("A"), "1");
  EXPECT_EQ(plan->annotations.at(kStartCmdAnnotation), "s");
  EXPECT_EQ(plan->annotations.at(kStepsAnnotation), "0,1");  // the base's steps are "base"
}

TEST(TemplateStepsTest, BadOrUnsupportedStepsAreRefusedByNumber) {
  const v1::TemplateBuild image = OnImage("img");
  const v1::TemplateBuild plain;
  EXPECT_THAT(Plan(R"({"steps":[{"type":"RUN","args":["a"]},{"type":"HEALTHCHECK","args":["x"]}]})", image),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step 2: unknown step type 'HEALTHCHECK'")));
  EXPECT_THAT(Plan(R"({"steps":[{"type":"RUN","args":["a","root"]}]})", plain),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step 1: user 'root'")));
  EXPECT_THAT(Plan(R"({"steps":[{"type":"RUN","args":["a","user"]}]})", plain), IsOk());  // E2B's default user
  EXPECT_THAT(Plan(R"({"steps":[{"type":"COPY","args":["a","/b"],"filesHash":"zz"}]})", image),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("were not uploaded")));
  EXPECT_THAT(Plan(R"({"steps":[{"type":"COPY","args":["../a","/b"],"filesHash":"h"}]})", image, {{"h", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("relative path inside")));
  EXPECT_THAT(Plan(R"({"steps":[{"type":"COPY","args":["a","/b","","9x"],"filesHash":"h"}]})", image, {{"h", "x"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("octal")));
  EXPECT_THAT(Plan(R"({"steps":[{"type":"ENV","args":["1BAD","v"]}]})", image),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a variable name")));
  EXPECT_THAT(Plan(R"({"steps":[{"type":"RUN","args":[3]}]})", image), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Plan(R"({"steps":"RUN"})", image), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CopyHashes(json::parse(R"({"steps":[{"type":"COPY","filesHash":"../x"}]})").as_object()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TemplateStepsTest, AHostsFailureIsToldAsTheStepThatFailed) {
  v1::TemplateBuild build;
  build.set_error(
      "building template sha256-1 on h1: setup_commands[2] (/bin/sh -c if ... make) exited with code 3; output "
      "ends: boom");
  (*build.mutable_annotations())[kStepsAnnotation] = "0,1,3";
  auto [message, step] = DescribeFailure(build);
  EXPECT_EQ(message, "step 3 exited with code 3; output ends: boom");
  EXPECT_EQ(step, "3");
  build.set_error("no host offers what it needs");
  EXPECT_EQ(DescribeFailure(build).first, "no host offers what it needs");
  EXPECT_EQ(DescribeFailure(build).second, "");
  EXPECT_EQ(ShellQuote("a b'c"), "'a b'\"'\"'c'");
  EXPECT_EQ(ShellQuote("/srv/app-1"), "/srv/app-1");
  EXPECT_EQ(ShellQuote(""), "''");
}

}  // namespace
}  // namespace corral::sandbox_api
