#include "tools/corral/ui_link.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/rpc/auth.h"
#include "tests/support/subprocess.h"

namespace corral::cli {
namespace {

TEST(InspectorLinkTest, WithoutASecretTheLinkHasNoToken) {
  EXPECT_THAT(InspectorLink("http://127.0.0.1:7780", "", "", ""), IsOkAndHolds(std::string("http://127.0.0.1:7780/")));
  EXPECT_THAT(InspectorLink("http://127.0.0.1:7780/", "", "b1", ""),
              IsOkAndHolds(std::string("http://127.0.0.1:7780/#/batch/b1")));
  EXPECT_THAT(InspectorLink("http://127.0.0.1:7780", "", "b1", "b1:g0:e1"),
              IsOkAndHolds(std::string("http://127.0.0.1:7780/#/episode/b1:g0:e1")));
}

TEST(InspectorLinkTest, OnLoopbackAndElsewhereTheLinkCarriesAValidClusterToken) {
  const std::string secret = testing::WriteSecretFile(testing::MakeTestDir());
  for (const std::string host : {"10.1.2.3", "127.0.0.1"}) {
    auto link = InspectorLink("http://" + host + ":7780", secret, "b1", "");
    ASSERT_THAT(link, IsOk());
    const std::string prefix = "http://" + host + ":7780/?token=";
    ASSERT_EQ(link->rfind(prefix, 0), 0u) << *link;
    const std::string token = link->substr(prefix.size(), link->find('#') - prefix.size());
    CallAuthenticator auth(*TokenSigner::FromKeyFile(secret));
    EXPECT_THAT(auth.CheckClusterToken(token), IsOk());
    EXPECT_EQ(link->substr(link->find('#')), "#/batch/b1");
  }
}

TEST(InspectorLinkTest, RefusesWhatIsNotAnHttpAddress) {
  EXPECT_THAT(InspectorLink("127.0.0.1:7780", "", "", ""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(InspectorLink("http://nohost", "", "", ""), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace corral::cli
