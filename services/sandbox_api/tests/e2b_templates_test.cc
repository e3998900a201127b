// E2B's template calls against in-memory templates, leases and host, in the order `Template.build` makes them:
// request, upload link, upload (signed, no key), trigger, status with log offsets; then `exists`, a sandbox made
// from the template (its startCmd and readyCmd run), a failed build's reason, and another key's templates as good
// as missing.
#include "services/sandbox_api/e2b/e2b_templates.h"

#include "absl/strings/str_split.h"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "services/sandbox_api/e2b/e2b_control.h"
#include "services/sandbox_api/e2b/template_steps.h"
#include "services/sandbox_api/testing/fake_leases.h"
#include "services/sandbox_api/testing/fake_templates.h"
#include "tests/support/io_thread.h"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using testing_support::FakeLeases;
using testing_support::FakeTemplates;

class E2bTemplatesTest : public ::testing::Test {
 protected:
  E2bAnswer Call(const std::string& method, const std::string& target, const std::string& body = "",
                 const std::string& key = "") {
    std::string path = target;
    std::map<std::string, std::string> query;
    if (size_t q = target.find('?'); q != std::string::npos) {
      path = target.substr(0, q);
      for (absl::string_view kv : absl::StrSplit(target.substr(q + 1), '&')) {
        std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
        query[p.first] = p.second;
      }
    }
    E2bRequest r{.method = method,
                 .path = path,
                 .query = query,
                 .api_key = key == "none" ? ""
                            : key.empty() ? alice_
                                          : key,
                 .base_url = "http://api.test:3000",
                 .body = body};
    return io_.RunSync(control_.Handle(std::move(r)));
  }
  static json::value Json(const E2bAnswer& a) { return json::parse(a.body); }

  // POST /v3/templates and the trigger of a template with one RUN step; (template id, build id).
  std::pair<std::string, std::string> Started(const std::string& name, const std::string& extra = "") {
    E2bAnswer requested = Call("POST", "/v3/templates", absl::StrCat(R"({"name":")", name, R"("})"));
    EXPECT_EQ(requested.status, 202) << requested.body;
    const std::string id(Json(requested).at("templateID").as_string());
    const std::string build(Json(requested).at("buildID").as_string());
    E2bAnswer triggered =
        Call("POST", absl::StrCat("/v2/templates/", id, "/builds/", build),
             absl::StrCat(R"({"fromImage":"img","steps":[{"type":"RUN","args":["make"]}])", extra, "}"));
    EXPECT_EQ(triggered.status, 202) << triggered.body;
    return {id, build};
  }

  testing::IoThread io_;
  FakeClock clock_{absl::UnixEpoch() + absl::Hours(1)};
  std::shared_ptr<sandbox::FakeHost> host_ = std::make_shared<sandbox::FakeHost>("host-a:1", &clock_);
  FakeLeases leases_{host_};
  FakeTemplates templates_;
  api::E2bAuth auth_{*TokenSigner::FromKey(std::string(32, 'k'))};
  E2bTemplates e2b_templates_{&templates_, &leases_, &auth_, &clock_};
  E2bControlPlane control_{&leases_, &auth_, &clock_, E2bOptions(), {}, {}, &e2b_templates_};
  std::string alice_ = *auth_.MintApiKey("alice");
  std::string bob_ = *auth_.MintApiKey("bob");
};

TEST_F(E2bTemplatesTest, TheBuildCallsOfTheSdkInItsOrder) {
  E2bAnswer requested =
      Call("POST", "/v3/templates", R"({"name":"my-tpl:v1","tags":["extra"],"cpuCount":2,"memoryMB":1024})");
  ASSERT_EQ(requested.status, 202) << requested.body;
  const std::string id(Json(requested).at("templateID").as_string());
  const std::string build(Json(requested).at("buildID").as_string());
  EXPECT_EQ(Json(requested).at("tags"), json::parse(R"(["v1","extra"])"));
  EXPECT_EQ(Json(requested).at("names"), json::parse(R"(["my-tpl"])"));

  // The upload link: to this replica, signed for alice's files; a forged token writes nothing.
  E2bAnswer link = Call("GET", "/templates/" + id + "/files/abc123");
  ASSERT_EQ(link.status, 201) << link.body;
  EXPECT_EQ(Json(link).at("present"), false);
  const std::string url(Json(link).at("url").as_string());
  ASSERT_THAT(url, HasSubstr("http://api.test:3000/templates/" + id + "/files/abc123/upload?token="));
  const std::string upload = url.substr(std::string("http://api.test:3000").size());
  EXPECT_EQ(Call("PUT", upload + "x", "forged", "none").status, 403);
  EXPECT_EQ(Call("PUT", upload, std::string("\x1f\x8b archive", 10), "none").status, 200);
  EXPECT_EQ(Json(Call("GET", "/templates/" + id + "/files/abc123")).at("present"), true);
  EXPECT_EQ(Call("GET", "/templates/" + id + "/files/abc123", "", bob_).status, 404);  // not bob's template

  E2bAnswer triggered = Call("POST", "/v2/templates/" + id + "/builds/" + build,
                             R"({"fromImage":"img","steps":[{"type":"COPY","args":["a","/a"],"filesHash":"abc123"},)"
                             R"({"type":"ENV","args":["K","template","T","1"]},)"
                             R"({"type":"RUN","args":["make","root"]}],"startCmd":"serve","force":false})");
  ASSERT_EQ(triggered.status, 202) << triggered.body;
  EXPECT_EQ(triggered.body, "");  // the SDK reads a 202 with no body
  const v1::TemplateBuild started = templates_.Last(id);
  EXPECT_EQ(started.environment().image(), "img");
  EXPECT_EQ(started.environment().setup_files(0).content(), std::string("\x1f\x8b archive", 10));
  EXPECT_EQ(started.environment().limits().memory_bytes(), 1024ull << 20);
  EXPECT_EQ(started.environment().limits().cpu_weight(), 200u);
  EXPECT_THAT(started.environment().task_paths(), ElementsAre("/home/user"));
  EXPECT_EQ(started.annotations().at(kStartCmdAnnotation), "serve");

  // Status: the log from the offset on; building until the scheduler says otherwise.
  json::value status = Json(Call("GET", "/templates/" + id + "/builds/" + build + "/status?logsOffset=0"));
  EXPECT_EQ(status.at("status"), "building");
  ASSERT_EQ(status.at("logEntries").as_array().size(), 4u);
  EXPECT_EQ(status.at("logEntries").as_array()[0].at("message"), "FROM img");
  EXPECT_EQ(status.at("logs"), json::array());
  EXPECT_EQ(Json(Call("GET", "/templates/" + id + "/builds/" + build + "/status?logsOffset=4")).at("logEntries"),
            json::array());
  EXPECT_EQ(Call("GET", "/templates/aliases/my-tpl").status, 404);  // nothing ready yet: Harbor builds it
  EXPECT_EQ(Call("POST", "/v2/templates/" + id + "/builds/" + build, R"({"fromImage":"img"})").status, 400);

  templates_.Finish("alice", id, build);
  status = Json(Call("GET", "/templates/" + id + "/builds/" + build + "/status?logsOffset=4"));
  EXPECT_EQ(status.at("status"), "ready");
  EXPECT_EQ(status.at("logEntries").as_array().size(), 1u);
  E2bAnswer alias = Call("GET", "/templates/aliases/my-tpl%3Av1");
  ASSERT_EQ(alias.status, 200);
  EXPECT_EQ(Json(alias).at("templateID").as_string(), id);
  EXPECT_EQ(Call("GET", "/templates/aliases/my-tpl", "", bob_).status, 404);
  EXPECT_EQ(Json(Call("GET", "/templates/" + id + "/tags")).as_array().size(), 2u);

  // A sandbox from it: the build's environment, the create's own variables beside it, its startCmd started.
  E2bAnswer created = Call("POST", "/v2/sandboxes", R"({"templateID":"my-tpl:v1","envVars":{"K":"v"}})");
  ASSERT_EQ(created.status, 201) << created.body;
  ASSERT_THAT(leases_.requests(), SizeIs(1));
  EXPECT_EQ(leases_.requests()[0].environment().setup_commands_size(), started.environment().setup_commands_size());
  EXPECT_EQ(leases_.requests()[0].env().at("K"), "v");  // the create's own over the template's
  EXPECT_EQ(leases_.requests()[0].env().at("T"), "1");
  EXPECT_TRUE(leases_.requests()[0].environment().env().empty());
  EXPECT_EQ(Json(created).at("templateID"), "my-tpl:v1");
  EXPECT_EQ(Call("POST", "/v2/sandboxes", R"({"templateID":"my-tpl:v9"})").status, 404);  // no such tag

  EXPECT_EQ(Call("DELETE", "/templates/" + id, "", bob_).status, 404);
  EXPECT_EQ(Call("DELETE", "/templates/" + id).status, 204);
  E2bAnswer gone = Call("DELETE", "/templates/" + id);
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(Json(gone).at("code"), 404);  // deleteSnapshot reads the body's code
}

TEST_F(E2bTemplatesTest, ASandboxOfATemplateStartsItsStartCmdAndWaitsForItsReadyCmd) {
  auto [id, build] = Started("served", R"(,"startCmd":"python -m http.server","readyCmd":"[ -f /tmp/up ]")");
  templates_.Finish("alice", id, build);
  std::vector<std::string> ran;
  host_->OnExec([&](const std::string&, const v1::ExecRequest& r) {
    ran.push_back(r.command().argv(2));
    return sandbox::ExecOutcome{.exited = true};
  });
  E2bAnswer created = Call("POST", "/v2/sandboxes", R"({"templateID":"served"})");
  ASSERT_EQ(created.status, 201) << created.body;
  ASSERT_THAT(ran, SizeIs(2));
  EXPECT_THAT(ran[0], HasSubstr("nohup sh -c 'python -m http.server'"));
  EXPECT_EQ(ran[1], "[ -f /tmp/up ]");

  host_->OnExec([&](const std::string&, const v1::ExecRequest&) {
    sandbox::ExecOutcome failed{.exited = true};
    failed.exit.set_exit_code(127);
    failed.tail = "serve: not found";
    return failed;
  });
  E2bAnswer broken = Call("POST", "/v2/sandboxes", R"({"templateID":"served"})");
  EXPECT_EQ(broken.status, 400) << broken.body;
  EXPECT_THAT(broken.body, HasSubstr("startCmd did not start: serve: not found"));
  EXPECT_THAT(leases_.released(), SizeIs(1));  // the sandbox it had made is not left behind
}

TEST_F(E2bTemplatesTest, AFailedBuildIsReportedAsTheStepThatFailedAndMakesNoSandbox) {
  auto [id, build] = Started("broken");
  templates_.Finish("alice", id, build,
                    "building template k on h: setup_commands[0] (/bin/sh -c make) exited with code 2; output ends: "
                    "no rule");
  json::value status = Json(Call("GET", "/templates/" + id + "/builds/" + build + "/status"));
  EXPECT_EQ(status.at("status"), "error");
  EXPECT_EQ(status.at("reason").at("message"), "step 1 exited with code 2; output ends: no rule");
  EXPECT_EQ(status.at("reason").at("step"), "1");
  E2bAnswer create = Call("POST", "/v2/sandboxes", R"({"templateID":"broken"})");
  EXPECT_EQ(create.status, 400);
  EXPECT_THAT(create.body, HasSubstr("no ready build"));
  EXPECT_THAT(leases_.requests(), SizeIs(0));
}

TEST_F(E2bTemplatesTest, BadCallsAreRefusedAndChangeNothing) {
  EXPECT_EQ(Call("POST", "/v3/templates", R"({"name":"x"})", "bad-key").status, 401);
  EXPECT_EQ(Call("POST", "/v3/templates", R"({})").status, 400);
  EXPECT_EQ(Call("POST", "/v3/templates", R"({"name":"x","cpuCount":-1})").status, 400);
  EXPECT_EQ(Call("POST", "/v3/templates", "not json").status, 400);
  E2bAnswer requested = Call("POST", "/v3/templates", R"({"name":"x"})");
  const std::string id(Json(requested).at("templateID").as_string());
  const std::string build(Json(requested).at("buildID").as_string());
  const std::string trigger = "/v2/templates/" + id + "/builds/" + build;
  EXPECT_EQ(Call("POST", trigger, R"({"steps":[]})").status, 400);  // no base
  EXPECT_EQ(Call("POST", trigger, R"({"fromImage":"i","fromImageRegistry":{"type":"aws"}})").status, 400);
  EXPECT_EQ(Call("POST", trigger, R"({"fromTemplate":"missing"})").status, 404);
  EXPECT_EQ(Call("POST", trigger, R"({"fromImage":"i","steps":[{"type":"NOPE"}]})").status, 400);
  EXPECT_EQ(Call("POST", "/v2/templates/" + id + "/builds/bld-none", R"({"fromImage":"i"})").status, 404);
  EXPECT_EQ(Call("POST", trigger, R"({"fromImage":"i"})", bob_).status, 404);
  EXPECT_EQ(templates_.Last(id).status(), v1::TEMPLATE_BUILD_STATUS_WAITING);
  EXPECT_EQ(Call("GET", "/templates/" + id + "/builds/" + build + "/status?logsOffset=x").status, 400);
  EXPECT_EQ(Call("GET", "/templates/" + id + "/nothing").status, 400);
}

}  // namespace
}  // namespace corral::sandbox_api
