// Image references parsed as Docker reads them, and registry credentials read from docker/podman auth files. (The
// client's exchanges with a real registry are tested by tests/images/pull_test.py.)
#include "services/sandbox_host/images/registry_client.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral::sandbox {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

TEST(ImageReferenceTest, NamesAreNormalizedAsDockerDoes) {
  auto r = ParseImageReference("debian");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ToString(), "docker.io/library/debian:latest");
  r = ParseImageReference("ghcr.io/org/sub/repo:v1.2-rc_3");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registry, "ghcr.io");
  EXPECT_EQ(r->repository, "org/sub/repo");
  EXPECT_EQ(r->tag, "v1.2-rc_3");
  const std::string digest = "sha256:" + std::string(64, 'a');
  r = ParseImageReference("127.0.0.1:5000/corral/tiny@" + digest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registry, "127.0.0.1:5000");
  EXPECT_EQ(r->tag, "");
  EXPECT_EQ(r->digest, digest);
  r = ParseImageReference("localhost/x:1@" + digest);  // a tag and a digest: the digest decides the content
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ToString(), "localhost/x:1@" + digest);
  r = ParseImageReference("user/repo");  // Docker Hub, no library/ for two components
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ToString(), "docker.io/user/repo:latest");
}

TEST(ImageReferenceTest, MalformedReferencesAreRefusedNamingTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"Upper/case", "not a repository name component"},
      {"repo@sha256:abc", "64 lowercase hex"},
      {"repo@md5:0123", "64 lowercase hex"},
      {"repo:bad tag", "a tag is"},
      {"repo:", "a tag is"},
      {"reg.io//double", "not a repository name component"},
      {"reg.io/-dash", "not a repository name component"},
      {"reg.io/a..b", "not a repository name component"},
  };
  for (const auto& [text, message] : cases) {
    auto r = ParseImageReference(text);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(r.status().message(), HasSubstr(message)) << text;
  }
}

class CredentialsTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_ = (std::filesystem::temp_directory_path() / ("corral-auth-" + std::to_string(getpid()))).string();
};

TEST_F(CredentialsTest, AuthAndUsernamePasswordEntriesAreRead) {
  // "dXNlcjpwYXNz" is base64("user:pass"), as `podman login` writes it.
  auto c = LoadRegistryCredentials(Write(R"({"auths": {"https://reg.example.com/": {"auth": "dXNlcjpwYXNz"},
                                                        "127.0.0.1:5000": {"username": "u", "password": "p:w"}}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(*c, UnorderedElementsAre(Pair("reg.example.com", "user:pass"), Pair("127.0.0.1:5000", "u:p:w")));
}

TEST_F(CredentialsTest, MalformedFilesAreRefused) {
  for (const char* text : {"", "not json", R"({"other": {}})", R"({"auths": {"r": 1}})",
                           R"({"auths": {"r": {"auth": "!!notbase64"}}})", R"({"auths": {"r": {"username": "u"}}})"}) {
    EXPECT_EQ(LoadRegistryCredentials(Write(text)).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(LoadRegistryCredentials("/nonexistent/auth.json").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace corral::sandbox
