// Quotas at the proxy, end to end: a corral-ratelimiter keeping the quota, two corral-proxy replicas sharing it,
// and a corral-fake-llm that enforces a provider's quota of its own (HTTP 429 with Retry-After beyond it).
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "boost/json.hpp"
#include "libs/http/client.h"
#include "libs/http/prometheus_text.h"
#include "tests/integration/proxy_fixture.h"

namespace corral {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

class ProxyQuotaTest : public ProxyFixture {
 protected:
  struct Replica {
    testing::RunningService service;
    std::unique_ptr<v1::Proxy::Stub> stub;
  };

  void TearDown() override {
    for (Replica& r : replicas_) {
      r.service.process.Signal(SIGTERM);
      (void)r.service.process.Wait(absl::Seconds(20));
    }
    ProxyFixture::TearDown();
  }

  void StartLimiter(const std::string& limits_yaml) {
    std::ofstream(dir_ + "/limiter.yaml") << "limits:\n" << limits_yaml;
    auto s = testing::StartService(
        CORRAL_RATELIMITER,
        {"--config=" + dir_ + "/limiter.yaml", "--secret-file=" + secret_, "--grpc-listen=127.0.0.1:0",
         "--metrics-listen=127.0.0.1:0", "--state-path=" + dir_ + "/leases.db"},  // durable leases: no learning mode
        dir_, "ratelimiter");
    ASSERT_THAT(s, IsOk());
    limiter_.emplace(*std::move(s));
  }

  // A proxy replica in front of `backend`, its quotas at the limiter.
  void StartReplica(const std::string& backend, const std::string& quota, std::vector<std::string> extra = {}) {
    const size_t n = replicas_.size();
    std::vector<std::string> args = {"--secret-file=" + secret_,
                                     "--grpc-listen=127.0.0.1:0",
                                     "--metrics-listen=127.0.0.1:0",
                                     "--http-listen=127.0.0.1:0",
                                     absl::StrCat("--journal=", dir_, "/proxy-", n, ".db"),
                                     "--ratelimiter=" + limiter_->ready.grpc,
                                     absl::StrCat("--upstreams=[{url: http://", backend, ", quota: ", quota, "}]")};
    args.insert(args.end(), extra.begin(), extra.end());
    auto s = testing::StartService(CORRAL_PROXY, args, dir_, absl::StrCat("proxy-", n));
    ASSERT_THAT(s, IsOk());
    Replica r{*std::move(s), nullptr};
    ChannelOptions options;
    options.retry_unavailable = false;
    r.stub = v1::Proxy::NewStub(*MakeChannel(r.service.ready.grpc, options));
    replicas_.push_back(std::move(r));
  }

  std::string OpenOn(Replica& r, const std::string& env_id) { return Open(env_id, {}, r.stub.get()); }

  HttpReply Chat(const Replica& r, const std::string& token, const std::string& model = "fake-model") {
    const std::string& http = r.service.ready.http;
    http::Request req{boost::beast::http::verb::post, "/v1/chat/completions", 11};
    req.set(boost::beast::http::field::host, http);
    req.set(boost::beast::http::field::content_type, "application/json");
    req.set(boost::beast::http::field::authorization, "Bearer " + token);
    req.body() = absl::StrCat(R"({"model":")", model,
                              R"(","max_tokens":16,"messages":[{"role":"user","content":"hello there"}]})");
    req.prepare_payload();
    return Exchange(http.substr(0, http.rfind(':')), static_cast<uint16_t>(std::stoi(http.substr(http.rfind(':') + 1))),
                    std::move(req));
  }

  // `calls` chat calls spread over every replica by `clients` threads; every reply, in no particular order.
  std::vector<HttpReply> Load(int calls, int clients) {
    std::vector<std::string> tokens;
    for (int i = 0; i < calls; ++i)
      tokens.push_back(OpenOn(replicas_[static_cast<size_t>(i) % replicas_.size()], absl::StrCat("ep-", i)));
    absl::Mutex mu;
    std::vector<HttpReply> replies;
    int next = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < clients; ++t) {
      threads.emplace_back([&] {
        while (true) {
          int i;
          {
            absl::MutexLock lock(&mu);
            if (next == calls) return;
            i = next++;
          }
          HttpReply reply = Chat(replicas_[static_cast<size_t>(i) % replicas_.size()], tokens[static_cast<size_t>(i)]);
          absl::MutexLock lock(&mu);
          replies.push_back(std::move(reply));
        }
      });
    }
    for (auto& t : threads) t.join();
    return replies;
  }

  json::object Stats(const std::string& backend) {
    return json::parse(Backend(backend, "/admin/stats").body).as_object();
  }

  static double Metric(const std::string& address, const std::string& name,
                       const std::map<std::string, std::string>& labels) {
    auto text = http::HttpGet(address, "/metrics");
    if (!text.ok()) return -1;
    auto exposition = http::ParsePrometheusText(*text);
    if (!exposition.ok()) return -1;
    return exposition->Value(name, labels).value_or(0);
  }

  std::optional<testing::RunningService> limiter_;
  std::vector<Replica> replicas_;
};

TEST_F(ProxyQuotaTest, TwoReplicasStayWithinTheProvidersQuotaAndNoAgentSeesA429) {
  // The provider allows 10 requests/s (burst 5) and 4 at once, and answers 429 beyond; the cluster's quota, with
  // headroom, is 8/s (burst 4) and 3 at once, plus a token quota that does not bind (it is settled by usage).
  const std::string backend =
      StartBackend({"--quota-rps=10", "--quota-burst=5", "--quota-concurrency=4", "--ttft=30ms"});
  StartLimiter(
      "  - {name: llm_rpm, kind: rate, rate_per_s: 8, burst: 4}\n"
      "  - {name: llm_tpm, kind: rate, rate_per_s: 100000, burst: 100000}\n"
      "  - {name: llm_conc, kind: concurrency, permits: 3}\n");
  const std::string quota = "{requests: llm_rpm, tokens: llm_tpm, concurrency: llm_conc}";
  StartReplica(backend, quota);
  StartReplica(backend, quota);
  const absl::Time start = absl::Now();
  std::vector<HttpReply> replies = Load(/*calls=*/40, /*clients=*/12);
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(replies.size(), 40u);
  for (const HttpReply& r : replies) EXPECT_EQ(r.status, 200) << r.body;
  json::object stats = Stats(backend);
  EXPECT_EQ(stats["throttled"].as_int64(), 0) << json::serialize(stats);
  EXPECT_EQ(stats["requests"].as_int64(), 40);
  // (The limiter grants 3 at once; the provider may still count a finished call for a moment after its answer.)
  EXPECT_LE(stats["max_in_flight"].as_int64(), 4);
  // 40 calls at 8/s after a burst of 4 take at least 4.5 s: the quota, not the load, set the pace.
  EXPECT_GE(took, absl::Milliseconds(4400));
  // Each call's token estimate (its bytes / 4 plus max_tokens 16) was above its usage: the rest came back.
  EXPECT_GT(Metric(limiter_->ready.metrics, "corral_ratelimiter_adjusted_tokens_total",
                   {{"limit", "llm_tpm"}, {"direction", "refund"}}),
            0);
  for (const Replica& r : replicas_) {
    EXPECT_GT(Metric(r.service.ready.metrics, "corral_proxy_quota_wait_seconds_count", {}), 0);
    EXPECT_EQ(Metric(r.service.ready.metrics, "corral_proxy_quota_calls_total", {{"outcome", "refused"}}), 0);
  }
}

TEST_F(ProxyQuotaTest, AnUpstreams429HoldsTheQuotaAndTheCallWaitsItsTurnInsteadOfFailing) {
  // The cluster's quota is set too high (50/s) for the provider (4/s, burst 2): the provider's 429s come back
  // with Retry-After, the proxies hold the quota that long, and every call still succeeds.
  const std::string backend = StartBackend({"--quota-rps=4", "--quota-burst=2"});
  StartLimiter("  - {name: llm_rpm, kind: rate, rate_per_s: 50, burst: 20}\n");
  StartReplica(backend, "{requests: llm_rpm}");
  StartReplica(backend, "{requests: llm_rpm}");
  std::vector<HttpReply> replies = Load(/*calls=*/16, /*clients=*/8);
  ASSERT_EQ(replies.size(), 16u);
  for (const HttpReply& r : replies) EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_GT(Stats(backend)["throttled"].as_int64(), 0);
  EXPECT_GT(Metric(limiter_->ready.metrics, "corral_ratelimiter_holds_total", {{"limit", "llm_rpm"}}), 0);
  double throttled = 0;
  for (const Replica& r : replicas_) {
    throttled += Metric(r.service.ready.metrics, "corral_proxy_quota_calls_total", {{"outcome", "throttled"}});
  }
  EXPECT_GT(throttled, 0);
}

TEST_F(ProxyQuotaTest, AStreamingCallWaitingForItsQuotaGetsKeepalivesAndThenItsAnswer) {
  const std::string backend = StartBackend();
  StartLimiter("  - {name: slow, kind: rate, rate_per_s: 1, burst: 1}\n");
  StartReplica(backend, "{requests: slow}", {"--keepalive-interval=100ms"});
  Replica& proxy = replicas_[0];
  ASSERT_EQ(Chat(proxy, OpenOn(proxy, "ep-first")).status, 200);  // the bucket is empty now: the next waits ~1 s
  const std::string token = OpenOn(proxy, "ep-stream");
  host_ = "127.0.0.1";
  port_ = static_cast<uint16_t>(std::stoi(proxy.service.ready.http.substr(proxy.service.ready.http.rfind(':') + 1)));
  int keepalives_before_data = 0;
  bool data = false;
  const std::string all =
      Stream(token, R"({"model":"fake-model","stream":true,"messages":[{"role":"user","content":"hi"}]})",
             [&](const std::string& piece, absl::Duration) {
               if (!data && absl::StrContains(piece, ": keepalive")) ++keepalives_before_data;
               data = data || absl::StrContains(piece, "data: {");
               return true;
             });
  EXPECT_GE(keepalives_before_data, 3) << all;  // about ten in the second it waited
  EXPECT_THAT(all, HasSubstr(R"("content":"echo:")"));
  EXPECT_THAT(all, HasSubstr(R"("content":" hi")"));
  EXPECT_THAT(all, HasSubstr("data: [DONE]"));
}

TEST_F(ProxyQuotaTest, BeyondTheWaitBoundTheAgentGets429AndAMissingLimitIsNamed) {
  const std::string backend = StartBackend({"--models=fake-model,judge"});
  StartLimiter("  - {name: slow, kind: rate, rate_per_s: 1, burst: 1}\n");
  StartReplica(backend, "{requests: slow}",
               {"--quota-max-wait=1500ms", "--model-quotas={judge: {concurrency: judge_conc}}"});
  Replica& proxy = replicas_[0];
  std::vector<HttpReply> replies = Load(/*calls=*/5, /*clients=*/5);
  int ok = 0, limited = 0;
  for (const HttpReply& r : replies) {
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++limited;
      EXPECT_THAT(r.body, HasSubstr("rate_limit_exceeded"));
      EXPECT_THAT(r.body, HasSubstr("quota 'slow'"));
    }
  }
  // 1/s with a burst of 1 and a 1.5 s bound: the first call at once, the second after 1 s, the rest refused.
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(limited, 3);
  EXPECT_EQ(Metric(proxy.service.ready.metrics, "corral_proxy_quota_calls_total", {{"outcome", "refused"}}), 3);
  // A quota naming a limit the ratelimiter does not have: a 503 that says which.
  HttpReply judge = Chat(proxy, OpenOn(proxy, "ep-judge"), "judge");
  EXPECT_EQ(judge.status, 503);
  EXPECT_THAT(judge.body, HasSubstr("quota 'judge_conc'"));
}

}  // namespace
}  // namespace corral
