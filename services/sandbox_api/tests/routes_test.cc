// The sandbox API's one route table: every door's paths found, envd's only for a request that names a sandbox,
// prefixes only at a segment boundary, and each envd Connect call typed.
#include "services/sandbox_api/routes.h"

#include <set>

#include "gtest/gtest.h"

namespace corral::sandbox_api {
namespace {

namespace bhttp = boost::beast::http;

TEST(RoutesTest, EachPathFindsItsDoorAndEnvdOnlyForASandboxsRequests) {
  const Route* health = FindRoute(Door::kSandboxFusion, "/health");
  ASSERT_NE(health, nullptr);
  EXPECT_EQ(health->door, Door::kSandboxFusion);
  const Route* envd_health = FindRoute(Door::kEnvd, "/health");
  ASSERT_NE(envd_health, nullptr);
  EXPECT_EQ(envd_health->door, Door::kEnvd);
  EXPECT_EQ(envd_health->label, "envd_health");
  EXPECT_EQ(FindRoute(Door::kSandboxFusion, "/process.Process/Start"), nullptr);
  EXPECT_EQ(FindRoute(Door::kEnvd, "/run_code"), nullptr);
  // The code interpreter's paths are its own: not envd's, not the service's.
  ASSERT_NE(FindRoute(Door::kCodeInterpreter, "/contexts/ctx-1/restart"), nullptr);
  EXPECT_EQ(FindRoute(Door::kCodeInterpreter, "/execute")->label, "code_execute");
  EXPECT_EQ(FindRoute(Door::kEnvd, "/execute"), nullptr);
  EXPECT_EQ(FindRoute(Door::kSandboxFusion, "/contexts"), nullptr);
  EXPECT_EQ(FindRoute(Door::kCodeInterpreter, "/files"), nullptr);

  ASSERT_NE(FindRoute(Door::kSandboxFusion, "/sandboxes/ls-1/timeout"), nullptr);
  EXPECT_EQ(FindRoute(Door::kSandboxFusion, "/sandboxes/ls-1/timeout")->door, Door::kE2bControl);
  EXPECT_EQ(FindRoute(Door::kSandboxFusion, "/v2/sandboxes")->door, Door::kE2bControl);
  EXPECT_EQ(FindRoute(Door::kSandboxFusion, "/sandboxesXYZ"), nullptr);
  EXPECT_EQ(FindRoute(Door::kSandboxFusion, "/run_code/x"), nullptr);  // exact paths are exact
}

TEST(RoutesTest, EveryEnvdCallIsOneTypedRowWithItsMethodAndLabel) {
  const Route* start = FindRoute(Door::kEnvd, "/process.Process/Start");
  ASSERT_NE(start, nullptr);
  EXPECT_NE(start->stream, nullptr);
  EXPECT_EQ(start->unary, nullptr);
  EXPECT_EQ(start->label, "envd_stream");
  const Route* list = FindRoute(Door::kEnvd, "/filesystem.Filesystem/ListDir");
  ASSERT_NE(list, nullptr);
  EXPECT_NE(list->unary, nullptr);
  EXPECT_EQ(list->label, "envd_rpc");
  EXPECT_TRUE(list->Takes(bhttp::verb::post));
  EXPECT_FALSE(list->Takes(bhttp::verb::get));
  EXPECT_EQ(FindRoute(Door::kEnvd, "/process.Process/StreamInput"), nullptr);  // not served

  std::set<std::string> paths;
  int calls = 0;
  for (const Route& r : Routes()) {
    EXPECT_TRUE(paths.insert(std::string(r.path) + (r.door == Door::kEnvd ? "@envd" : "")).second) << r.path;
    calls += r.unary != nullptr || r.stream != nullptr ? 1 : 0;
    EXPECT_FALSE(r.unary != nullptr && r.stream != nullptr) << r.path;
    EXPECT_EQ(r.fusion != nullptr, r.door == Door::kSandboxFusion) << r.path;
  }
  EXPECT_EQ(calls, 13);  // 7 of process.Process, 6 of filesystem.Filesystem
  const Route* files = FindRoute(Door::kEnvd, "/files");
  ASSERT_NE(files, nullptr);
  EXPECT_TRUE(files->Takes(bhttp::verb::get) && files->Takes(bhttp::verb::post));
  EXPECT_FALSE(files->Takes(bhttp::verb::delete_));
}

}  // namespace
}  // namespace corral::sandbox_api
