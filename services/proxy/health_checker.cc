#include "services/proxy/health_checker.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/this_coro.hpp"
#include "libs/async/sleep.h"
#include "libs/http/client.h"
#include "libs/http/openai_json.h"
#include "libs/http/server.h"
#include "spdlog/spdlog.h"

namespace corral::proxy {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

}  // namespace

HealthChecker::HealthChecker(UpstreamPool* upstreams, ProxyMetrics* metrics, Clock* clock, absl::Duration timeout)
    : upstreams_(upstreams), clock_(clock), timeout_(timeout) {
  for (Upstream* u : upstreams_->all())
    healthy_.push_back(&metrics->upstream_healthy.Add({{"upstream", u->spec.name}}));
}

asio::awaitable<void> HealthChecker::CheckAll() {
  auto executor = co_await asio::this_coro::executor;
  const std::vector<Upstream*> all = upstreams_->all();
  for (size_t i = 0; i < all.size(); ++i) {
    Upstream* u = all[i];
    http::Request req{bhttp::verb::get, "/health", 11};
    auto r = co_await http::Fetch(executor, u->spec.host, u->spec.port, req, timeout_);
    const bool healthy = r.ok() && r->status == 200;
    const std::string why = !r.ok()            ? absl::StrCat("GET /health: ", r.status().message())
                            : r->status != 200 ? absl::StrCat("GET /health answered HTTP ", r->status)
                                               : "";
    if (healthy != u->healthy.load()) {
      spdlog::info("upstream {} is now {}{}", u->spec.name, healthy ? "healthy" : "unhealthy",
                   healthy ? "" : " (" + why + ")");
    }
    u->SetHealth(healthy, why);
    if (healthy) {
      http::Request list{bhttp::verb::get, "/v1/models", 11};
      auto models = co_await http::Fetch(executor, u->spec.host, u->spec.port, list, timeout_);
      if (models.ok() && models->status == 200) u->SetDiscovered(http::ModelIds(models->body));
    }
    healthy_[i]->Set(upstreams_->Available(*u) ? 1 : 0);
  }
}

asio::awaitable<void> HealthChecker::Run(absl::Duration interval) {
  while (true) {
    co_await CheckAll();
    co_await async::SleepFor(*clock_, interval);
  }
}

}  // namespace corral::proxy
