#include "libs/core/token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"

namespace corral {
namespace {

using ::testing::HasSubstr;

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";
constexpr char kOtherKey[] = "fedcba9876543210fedcba9876543210";

TokenSigner Signer(const char* key) { return *TokenSigner::FromKey(key); }

TEST(TokenSigner, SignedTokenVerifiesAndReturnsPayload) {
  TokenSigner signer = Signer(kKey);
  std::string token = signer.Sign("proxy-env", "episode-42.g3");
  EXPECT_THAT(token, ::testing::StartsWith("episode-42.g3."));
  EXPECT_THAT(signer.Verify("proxy-env", token), IsOkAndHolds("episode-42.g3"));
}

TEST(TokenSigner, TamperedTokenFails) {
  TokenSigner signer = Signer(kKey);
  std::string token = signer.Sign("sandbox", "sb-1");
  std::string other_payload = "sb-2" + token.substr(4);
  EXPECT_THAT(signer.Verify("sandbox", other_payload), StatusIs(absl::StatusCode::kUnauthenticated));
  std::string flipped = token;
  flipped.back() = flipped.back() == 'A' ? 'B' : 'A';
  EXPECT_THAT(signer.Verify("sandbox", flipped), StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST(TokenSigner, TruncatedOrMalformedTokenFails) {
  TokenSigner signer = Signer(kKey);
  std::string token = signer.Sign("sandbox", "sb-1");
  EXPECT_THAT(signer.Verify("sandbox", token.substr(0, token.size() - 1)),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(signer.Verify("sandbox", "sb-1"), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("malformed")));
  EXPECT_THAT(signer.Verify("sandbox", ""), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(signer.Verify("sandbox", "sb-1."), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(signer.Verify("sandbox", std::string("sb-1\0.x", 7)), StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST(TokenSigner, TokenFromAnotherKeyOrPurposeFails) {
  std::string token = Signer(kOtherKey).Sign("sandbox", "sb-1");
  EXPECT_THAT(Signer(kKey).Verify("sandbox", token), StatusIs(absl::StatusCode::kUnauthenticated));
  std::string env_token = Signer(kKey).Sign("proxy-env", "sb-1");
  EXPECT_THAT(Signer(kKey).Verify("sandbox", env_token), StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST(TokenSigner, ShortKeysAreRejected) {
  EXPECT_THAT(TokenSigner::FromKey("short"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 32")));
}

class KeyFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& content, mode_t mode) {
    std::string path =
        ::testing::TempDir() + "/token_test_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::ofstream(path, std::ios::trunc) << content;
    chmod(path.c_str(), mode);
    return path;
  }
};

TEST_F(KeyFileTest, PrivateFileLoadsAndTrailingNewlineIsIgnored) {
  std::string path = Write(std::string(kKey) + "\n", 0600);
  auto signer = TokenSigner::FromKeyFile(path);
  ASSERT_THAT(signer, IsOk());
  EXPECT_THAT(Signer(kKey).Verify("x", signer->Sign("x", "p")), IsOkAndHolds("p"));
}

TEST_F(KeyFileTest, WorldReadableOrGroupWritableFileIsRefused) {
  std::string path = Write(kKey, 0644);
  EXPECT_THAT(TokenSigner::FromKeyFile(path), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("chmod 600")));
  EXPECT_THAT(TokenSigner::FromKeyFile(Write(kKey, 0660)), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(KeyFileTest, GroupMayReadOnlyWhenRootOwnsTheFile) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hand the file to root and to another uid";
  // Root-owned and group-readable: a Kubernetes Secret mounted with fsGroup.
  std::string shared = Write(std::string(kKey) + "\n", 0440);
  ASSERT_EQ(chown(shared.c_str(), 0, 12345), 0);
  EXPECT_THAT(TokenSigner::FromKeyFile(shared), IsOk());
  // Owned by someone else, the group must not read it.
  std::string other = Write(kKey, 0640);
  ASSERT_EQ(chown(other.c_str(), 12345, 12345), 0);
  EXPECT_THAT(TokenSigner::FromKeyFile(other),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("owner uid 12345")));
}

TEST_F(KeyFileTest, ASymlinkIsFollowedAsInAKubernetesSecretVolume) {
  const std::string dir = ::testing::TempDir() + "/token_test_secret_volume";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/..2026_11_24");
  std::string target = dir + "/..2026_11_24/secret";
  std::ofstream(target) << kKey;
  chmod(target.c_str(), 0600);
  std::filesystem::create_directory_symlink("..2026_11_24", dir + "/..data");
  std::filesystem::create_symlink("..data/secret", dir + "/secret");
  EXPECT_THAT(TokenSigner::FromKeyFile(dir + "/secret"), IsOk());
  std::filesystem::remove_all(dir);
}

TEST_F(KeyFileTest, MissingShortAndNonRegularFilesAreRefused) {
  EXPECT_THAT(TokenSigner::FromKeyFile("/nonexistent/secret"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(TokenSigner::FromKeyFile(Write("tiny", 0600)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 32")));
  EXPECT_THAT(TokenSigner::FromKeyFile(::testing::TempDir()), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(TokenSigner, EphemeralKeysDiffer) {
  TokenSigner a = TokenSigner::Ephemeral();
  TokenSigner b = TokenSigner::Ephemeral();
  EXPECT_THAT(a.Verify("x", a.Sign("x", "p")), IsOkAndHolds("p"));
  EXPECT_THAT(b.Verify("x", a.Sign("x", "p")), StatusIs(absl::StatusCode::kUnauthenticated));
}

}  // namespace
}  // namespace corral
