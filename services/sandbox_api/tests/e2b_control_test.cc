// E2B's control plane against an in-memory scheduler (leases) and host: what the SDK sends and reads, keys
// checked on every call, another key's sandbox as good as missing, and bad requests refused before anything is
// leased.
#include "services/sandbox_api/e2b/e2b_control.h"

#include <set>

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/http/url.h"
#include "services/sandbox_api/testing/fake_leases.h"
#include "tests/support/io_thread.h"

namespace corral::sandbox_api {
namespace {

namespace json = boost::json;
using sandbox::FakeHost;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing_support::FakeLeases;

class E2bControlTest : public ::testing::Test {
 protected:
  E2bAnswer Call(const std::string& method, const std::string& path, const std::string& body = "",
                 const std::string& key = "") {
    http::Target target = *http::ParseTarget(path);  // as the HTTP layer splits it
    E2bRequest r{.method = method,
                 .path = target.path,
                 .query = target.query,
                 .api_key = key.empty() ? alice_ : key,
                 .body = body};
    return io_.RunSync(control_.Handle(std::move(r)));
  }
  static json::value Json(const E2bAnswer& a) { return json::parse(a.body); }

  testing::IoThread io_;
  FakeClock clock_{absl::UnixEpoch() + absl::Hours(1)};  // when FakeLeases says its leases were made
  std::shared_ptr<sandbox::FakeHost> host_ = std::make_shared<sandbox::FakeHost>("host-a:1", &clock_);
  FakeLeases leases_{host_};
  api::E2bAuth auth_{*TokenSigner::FromKey(std::string(32, 'k'))};
  std::vector<std::string> killed_;  // what the in-sandbox API was told to forget
  std::vector<std::string> leased_;  // what the in-sandbox API was told to keep
  E2bControlPlane control_{&leases_,
                           &auth_,
                           &clock_,
                           E2bOptions(),
                           [this](const std::string& id) { killed_.push_back(id); },
                           [this](const v1::SandboxLease& lease) { leased_.push_back(lease.lease_id()); }};
  std::string alice_ = *auth_.MintApiKey("alice");
  std::string bob_ = *auth_.MintApiKey("bob");
};

TEST_F(E2bControlTest, CreateLeasesASandboxAsTheSdkAsksAndAnswersWhatItReads) {
  E2bAnswer a = Call("POST", "/v2/sandboxes",
                     R"({"templateID":"base","metadata":{"k":"v"},"envVars":{"GLOBAL":"1"},"timeout":120,)"
                     R"("allow_internet_access":true})");
  ASSERT_EQ(a.status, 201) << a.body;
  const json::object sbx = Json(a).as_object();
  const std::string id(sbx.at("sandboxID").as_string());
  EXPECT_EQ(sbx.at("envdVersion").as_string(), "0.6.4");
  EXPECT_EQ(sbx.at("templateID").as_string(), "base");
  // The access token opens this sandbox's envd, and names its owner.
  EXPECT_EQ(*auth_.CheckAccess(id, std::string(sbx.at("envdAccessToken").as_string())), "alice");
  EXPECT_FALSE(auth_.CheckAccess("ls-other", std::string(sbx.at("envdAccessToken").as_string())).ok());

  ASSERT_THAT(leases_.requests(), SizeIs(1));
  const v1::LeaseSandboxRequest lease = leases_.requests()[0];
  EXPECT_EQ(lease.owner(), "alice");
  EXPECT_EQ(lease.ttl().seconds(), 120);
  EXPECT_EQ(lease.environment().image(), "");  // base: a plain sandbox
  EXPECT_EQ(lease.env().at("GLOBAL"), "1");    // the sandbox's own: no template is built with them
  EXPECT_EQ(lease.environment().workdir(), "/home/user");
  EXPECT_EQ(lease.environment().network_policy(), v1::NETWORK_POLICY_OPEN);
  EXPECT_EQ(lease.metadata().at("k"), "v");
  // Room is waited for 40 s, and the answer comes within 50 s: before the SDK's default timeout (60 s) gives up.
  EXPECT_EQ(FromProto(lease.wait()), absl::Seconds(40));
  EXPECT_EQ(leases_.deadlines()[0] - clock_.Now(), absl::Seconds(50));

  E2bAnswer info = Call("GET", "/sandboxes/" + id);
  ASSERT_EQ(info.status, 200);
  EXPECT_EQ(Json(info).at("metadata").at("k").as_string(), "v");
  EXPECT_EQ(Json(info).at("state").as_string(), "running");

  E2bAnswer list = Call("GET", "/v2/sandboxes");
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(Json(list).as_array().size(), 1u);
  EXPECT_EQ(Json(list).as_array()[0].at("sandboxID").as_string(), id);
  EXPECT_FALSE(Json(list).as_array()[0].as_object().contains("envdAccessToken"));
  // Bob sees none of it: his list is empty, and Alice's sandbox is not found for him.
  EXPECT_THAT(Json(Call("GET", "/v2/sandboxes", "", bob_)).as_array(), IsEmpty());
  E2bAnswer foreign = Call("DELETE", "/sandboxes/" + id, "", bob_);
  EXPECT_EQ(foreign.status, 404);
  EXPECT_EQ(Json(foreign).at("code").as_int64(), 404);  // the SDK tells "not found" from the body's code
  EXPECT_THAT(host_->live(), SizeIs(1));

  EXPECT_EQ(Call("POST", "/sandboxes/" + id + "/timeout", R"({"timeout":30})").status, 204);
  EXPECT_EQ(Json(Call("GET", "/sandboxes/" + id)).at("endAt").as_string(), "1970-01-01T01:00:30.000Z");
  EXPECT_EQ(Call("DELETE", "/sandboxes/" + id).status, 204);
  EXPECT_THAT(host_->live(), IsEmpty());
  EXPECT_THAT(killed_, ElementsAre(id));
  EXPECT_EQ(Call("DELETE", "/sandboxes/" + id).status, 404);  // the SDK's kill() -> false
}

TEST_F(E2bControlTest, TheCodeInterpretersTemplateIsAPlainSandboxWithATrafficToken) {
  E2bAnswer a = Call("POST", "/v2/sandboxes", R"({"templateID":"code-interpreter-v1","timeout":60})");
  ASSERT_EQ(a.status, 201) << a.body;
  const json::object sbx = Json(a).as_object();
  EXPECT_EQ(sbx.at("templateID").as_string(), "code-interpreter-v1");
  // @e2b/code-interpreter presents the traffic token on its context calls: it opens this sandbox alone.
  EXPECT_EQ(sbx.at("trafficAccessToken").as_string(), sbx.at("envdAccessToken").as_string());
  ASSERT_THAT(leases_.requests(), SizeIs(1));
  EXPECT_EQ(leases_.requests()[0].environment().image(), "");  // no image to pull: the kernel is Corral's
  EXPECT_TRUE(IsPlainTemplate("base"));
  EXPECT_FALSE(IsPlainTemplate("python:3.12"));
}

TEST_F(E2bControlTest, AMetadataKeyNamesTheDefaultTemplatesImageAsSlimeSendsIt) {
  E2bControlPlane slime(&leases_, &auth_, &clock_, E2bOptions{.image_metadata_key = "image"});
  auto create = [&](const std::string& body) {
    return io_.RunSync(
        slime.Handle(E2bRequest{.method = "POST", .path = "/v2/sandboxes", .api_key = alice_, .body = body}));
  };
  ASSERT_EQ(create(R"({"metadata":{"image":"python:3.12-slim","task":"t1"}})").status, 201);
  ASSERT_EQ(create(R"({"templateID":"node:20","metadata":{"image":"python:3.12-slim"}})").status, 201);
  ASSERT_EQ(create(R"({"metadata":{"task":"t2"}})").status, 201);
  ASSERT_THAT(leases_.requests(), SizeIs(3));
  EXPECT_EQ(leases_.requests()[0].environment().image(), "python:3.12-slim");
  EXPECT_EQ(leases_.requests()[0].metadata().at("image"), "python:3.12-slim");  // kept as metadata too
  EXPECT_EQ(leases_.requests()[1].environment().image(), "node:20");            // a template names its own image
  EXPECT_EQ(leases_.requests()[2].environment().image(), "");                   // no key: a plain sandbox
  E2bAnswer bad = create(R"({"metadata":{"image":"a b"}})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("metadata 'image'"));
  EXPECT_THAT(leases_.requests(), SizeIs(3));  // nothing leased
  // Without the option the key is only metadata.
  ASSERT_EQ(Call("POST", "/v2/sandboxes", R"({"metadata":{"image":"python:3.12-slim"}})").status, 201);
  EXPECT_EQ(leases_.requests().back().environment().image(), "");
}

// Harbor's and the SDK's lifecycle: pause (409 the second time), its state in info and list, connect resumes
// (201, then 200 for a running one), a refresh renews, and getMetrics reads the host's cgroup counters.
TEST_F(E2bControlTest, PauseConnectRefreshAndMetricsAsTheSdkCallsThem) {
  E2bAnswer a = Call("POST", "/v2/sandboxes", R"({"templateID":"base","timeout":60})");
  ASSERT_EQ(a.status, 201) << a.body;
  const std::string id(Json(a).at("sandboxID").as_string());
  const std::string sandbox_id = (*io_.RunSync(leases_.Get(id, "alice"))).sandbox_id();
  EXPECT_THAT(leased_, ElementsAre(id));  // kept by the in-sandbox API for the first command
  EXPECT_EQ(Call("POST", "/sandboxes/" + id + "/pause", "{}").status, 204);
  EXPECT_THAT(killed_, ElementsAre(id));  // the in-sandbox API forgets its cached lease
  E2bAnswer again = Call("POST", "/sandboxes/" + id + "/pause", "{}");
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(Json(again).at("code").as_int64(), 409);  // what the SDK reads to answer false
  EXPECT_EQ((*io_.RunSync(host_->Get(sandbox_id, absl::Seconds(1)))).state(), v1::SANDBOX_STATE_PAUSED);
  EXPECT_EQ(Json(Call("GET", "/sandboxes/" + id)).at("state").as_string(), "paused");
  EXPECT_THAT(Json(Call("GET", "/v2/sandboxes", "")).as_array(), SizeIs(1));
  E2bRequest running{.method = "GET", .path = "/v2/sandboxes", .query = {{"state", "running"}}, .api_key = alice_};
  EXPECT_THAT(Json(io_.RunSync(control_.Handle(running))).as_array(), IsEmpty());
  E2bRequest paused{
      .method = "GET", .path = "/v2/sandboxes", .query = {{"state", "running,paused"}}, .api_key = alice_};
  EXPECT_THAT(Json(io_.RunSync(control_.Handle(paused))).as_array(), SizeIs(1));
  EXPECT_EQ(Call("POST", "/sandboxes/" + id + "/pause", "{}", bob_).status, 404);  // another key's

  E2bAnswer resumed = Call("POST", "/v2/sandboxes/" + id + "/connect", R"({"timeout":30})");
  ASSERT_EQ(resumed.status, 201) << resumed.body;
  EXPECT_THAT(leased_, ElementsAre(id, id));
  EXPECT_EQ(Json(resumed).at("sandboxID").as_string(), id);
  EXPECT_EQ((*io_.RunSync(host_->Get(sandbox_id, absl::Seconds(1)))).state(), v1::SANDBOX_STATE_READY);
  EXPECT_EQ(Call("POST", "/v2/sandboxes/" + id + "/connect", "{}").status, 200);  // running: nothing to resume
  EXPECT_EQ(Json(Call("GET", "/sandboxes/" + id)).at("state").as_string(), "running");

  EXPECT_EQ(Call("POST", "/sandboxes/" + id + "/refreshes", R"({"duration":90})").status, 204);
  EXPECT_EQ(Call("POST", "/sandboxes/" + id + "/refreshes", R"({"duration":-1})").status, 400);
  EXPECT_EQ(Call("POST", "/sandboxes/ls-none/refreshes", "{}").status, 404);

  // No cgroup measured: no sample, never zeros that look measured.
  E2bAnswer none = Call("GET", "/sandboxes/" + id + "/metrics");
  ASSERT_EQ(none.status, 200);
  EXPECT_THAT(Json(none).as_array(), IsEmpty());
  v1::ResourceUsage usage;
  usage.set_measured(true);
  usage.set_cpu_count(2);
  usage.set_memory_bytes(64 << 20);
  usage.set_memory_limit_bytes(1 << 30);
  usage.set_disk_used_bytes(4096);
  usage.set_disk_total_bytes(1 << 20);
  usage.mutable_cpu_time()->set_seconds(1);
  host_->SetUsage(sandbox_id, usage);
  clock_.Advance(absl::Seconds(10));
  // Before the host's first sample: its use now.
  E2bAnswer m = Call("GET", "/sandboxes/" + id + "/metrics");
  ASSERT_EQ(m.status, 200) << m.body;
  ASSERT_THAT(Json(m).as_array(), SizeIs(1));
  const json::object first = Json(m).as_array()[0].as_object();
  EXPECT_EQ(first.at("cpuCount").as_int64(), 2);
  EXPECT_EQ(first.at("memUsed").as_int64(), 64 << 20);
  EXPECT_EQ(first.at("memTotal").as_int64(), 1 << 30);
  EXPECT_EQ(first.at("diskUsed").as_int64(), 4096);
  EXPECT_EQ(first.at("timestampUnix").as_int64(), absl::ToUnixSeconds(clock_.Now()));
  EXPECT_TRUE(first.at("timestamp").is_string());
  // 1 s of CPU over the 10 s since it started, on 2 CPUs: 5 %.
  EXPECT_DOUBLE_EQ(first.at("cpuUsedPct").as_double(), 5.0);
  // The host's samples over time: each one's share is over the time since the one before it. 2 s more CPU in 4 s,
  // on 2 CPUs: 25 %.
  const absl::Time t0 = clock_.Now();
  auto sample = [&](absl::Time t, int cpu_seconds, int64_t memory) {
    v1::UsageSample* s = usage.add_samples();
    ToProto(t, s->mutable_time());
    s->mutable_cpu_time()->set_seconds(cpu_seconds);
    s->set_memory_bytes(memory);
  };
  sample(t0, 1, 64 << 20);
  sample(t0 + absl::Seconds(4), 3, 96 << 20);
  host_->SetUsage(sandbox_id, usage);
  const json::array series = Json(Call("GET", "/sandboxes/" + id + "/metrics")).as_array();
  ASSERT_THAT(series, SizeIs(2));
  EXPECT_DOUBLE_EQ(series[0].at("cpuUsedPct").as_double(), 5.0);
  EXPECT_DOUBLE_EQ(series[1].at("cpuUsedPct").as_double(), 25.0);
  EXPECT_EQ(series[1].at("memUsed").as_int64(), 96 << 20);
  EXPECT_EQ(series[1].at("timestampUnix").as_int64(), absl::ToUnixSeconds(t0 + absl::Seconds(4)));
  // A start after the first sample keeps it as the base only.
  const json::array later =
      Json(Call("GET", absl::StrCat("/sandboxes/", id, "/metrics?start=", absl::ToUnixSeconds(t0) + 1))).as_array();
  ASSERT_THAT(later, SizeIs(1));
  EXPECT_DOUBLE_EQ(later[0].at("cpuUsedPct").as_double(), 25.0);
  EXPECT_EQ(Call("GET", "/sandboxes/" + id + "/metrics?start=yesterday").status, 400);
  EXPECT_EQ(Call("GET", "/sandboxes/" + id + "/metrics?end=-5").status, 400);
}

// Corral's usage answer, in the shape Daytona's users asked for: what was not measured is null, never 0.
TEST_F(E2bControlTest, UsageSaysWhatTheSandboxCostAndNullWhatWasNotMeasured) {
  const std::string id(Json(Call("POST", "/v2/sandboxes", "{}")).at("sandboxID").as_string());
  const std::string sandbox_id = (*io_.RunSync(leases_.Get(id, "alice"))).sandbox_id();
  json::object none = Json(Call("GET", "/sandboxes/" + id + "/usage")).as_object();
  EXPECT_EQ(none.at("sandboxID").as_string(), id);
  EXPECT_TRUE(none.at("cpu_seconds").is_null());
  EXPECT_TRUE(none.at("cost").is_null());
  v1::ResourceUsage usage;
  usage.mutable_cpu_time()->set_seconds(360);
  usage.set_memory_gib_seconds(7200);
  usage.set_own_disk_bytes(4096);
  usage.mutable_wall_time()->set_seconds(600);
  usage.set_processes_started(3);
  host_->SetUsage(sandbox_id, usage);
  const json::object u = Json(Call("GET", "/sandboxes/" + id + "/usage")).as_object();
  EXPECT_DOUBLE_EQ(u.at("cpu_seconds").as_double(), 360.0);
  EXPECT_DOUBLE_EQ(u.at("memory_gib_seconds").as_double(), 7200.0);
  EXPECT_TRUE(u.at("storage_gib_seconds").is_null());
  EXPECT_EQ(u.at("disk_bytes").to_number<uint64_t>(), 4096u);
  EXPECT_DOUBLE_EQ(u.at("wall_seconds").as_double(), 600.0);
  EXPECT_EQ(u.at("processes").to_number<uint64_t>(), 3u);
  EXPECT_TRUE(u.at("cost").is_null());  // no price table
  EXPECT_EQ(Call("GET", "/sandboxes/ls-none/usage").status, 404);
  EXPECT_EQ(Call("GET", "/sandboxes/" + id + "/usage", "", bob_).status, 404);  // another key's sandbox
}

TEST_F(E2bControlTest, ForkGivesEachChildItsOwnSandboxAndToken) {
  const std::string id(Json(Call("POST", "/v2/sandboxes", "{}")).at("sandboxID").as_string());
  E2bAnswer forked = Call("POST", "/sandboxes/" + id + "/fork", R"({"count":3,"timeout":60})");
  ASSERT_EQ(forked.status, 201) << forked.body;
  const json::array children = Json(forked).as_array();
  ASSERT_EQ(children.size(), 3u);
  std::set<std::string> ids;
  for (const json::value& c : children) {
    const std::string child(c.at("sandbox").at("sandboxID").as_string());
    ids.insert(child);
    EXPECT_TRUE(auth_.CheckAccess(child, std::string(c.at("sandbox").at("envdAccessToken").as_string())).ok());
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_FALSE(ids.contains(id));
  EXPECT_THAT(host_->live(), SizeIs(4));
  // The parent and each child are handed to the in-sandbox API for their first commands.
  EXPECT_THAT(std::set<std::string>(leased_.begin(), leased_.end()),
              ::testing::UnorderedElementsAre(id, *ids.begin(), *std::next(ids.begin()), *ids.rbegin()));
  EXPECT_EQ(Call("POST", "/sandboxes/" + id + "/fork", R"({"count":0})").status, 400);
  EXPECT_EQ(Call("POST", "/sandboxes/ls-none/fork", R"({"count":1})").status, 404);
}

TEST_F(E2bControlTest, KeysAreCheckedAndBadRequestsLeaseNothing) {
  E2bAnswer none = Call("POST", "/v2/sandboxes", "{}", "not-a-key");
  EXPECT_EQ(none.status, 401);
  EXPECT_THAT(none.body, HasSubstr("corral sandbox-api key"));
  // A key minted with another secret is no key here.
  api::E2bAuth other(*TokenSigner::FromKey(std::string(32, 'x')));
  EXPECT_EQ(Call("GET", "/v2/sandboxes", "", *other.MintApiKey("alice")).status, 401);
  EXPECT_FALSE(auth_.MintApiKey("a/b").ok());

  EXPECT_EQ(Call("POST", "/v2/sandboxes", "{not json").status, 400);
  EXPECT_EQ(Call("POST", "/v2/sandboxes", R"({"timeout":-5})").status, 400);
  EXPECT_EQ(Call("POST", "/v2/sandboxes", R"({"timeout":"soon"})").status, 400);
  EXPECT_EQ(Call("POST", "/v2/sandboxes", R"({"envVars":{"A":1}})").status, 400);
  EXPECT_EQ(Call("POST", "/v2/sandboxes", R"({"templateID":""})").status, 400);
  E2bRequest list{.method = "GET", .path = "/v2/sandboxes", .query = {{"limit", "0"}}, .api_key = alice_};
  EXPECT_EQ(io_.RunSync(control_.Handle(std::move(list))).status, 400);
  EXPECT_THAT(leases_.requests(), IsEmpty());
  EXPECT_THAT(host_->live(), IsEmpty());

  leases_.Refuse(absl::NotFoundError("image 'no-such' is on no host"));
  E2bAnswer missing = Call("POST", "/v2/sandboxes", R"({"templateID":"no-such"})");
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("template 'no-such' not found"));
  leases_.Refuse(absl::ResourceExhaustedError("no room"));
  EXPECT_EQ(Call("POST", "/v2/sandboxes", "{}").status, 429);
  EXPECT_EQ(Call("POST", "/sandboxes/x/pause", "{}").status, 404);  // no such sandbox
  E2bAnswer logs = Call("GET", "/sandboxes/x/logs");
  EXPECT_EQ(logs.status, 400);  // not 404, which the SDK reads as "no such sandbox"
  EXPECT_THAT(logs.body, HasSubstr("logs are not supported"));
}

}  // namespace
}  // namespace corral::sandbox_api
