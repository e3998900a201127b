// `corral top`: a live view of the cluster — hosts (state, capacity, sandboxes, running episodes, warm
// sandboxes), running batches, ratelimiter instances with waiters, proxy sessions and upstream health. Refreshes
// in place on a terminal; `--once` prints one snapshot (scripts, tests).
#include <unistd.h>

#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "corral/v1/proxy.grpc.pb.h"
#include "corral/v1/ratelimit.grpc.pb.h"
#include "libs/api/proto_time.h"
#include "libs/http/prometheus_text.h"
#include "libs/rpc/auth.h"
#include "libs/rpc/channel.h"
#include "libs/rpc/status_conversion.h"
#include "tools/corral/commands.h"
#include "tools/corral/output.h"
#include "tools/corral/run_report.h"
#include "tools/corral/scheduler_client.h"

namespace corral::cli {
namespace {

struct TopFlags {
  ConnectFlags conn;  // the scheduler; its token serves the others
  std::string limiter, proxy, proxy_metrics, scheduler_metrics;
  double interval_s = 2;
  bool once = false;
};

std::string HostStateName(v1::HostState s) {
  const std::string name = v1::HostState_Name(s);
  return absl::AsciiStrToLower(absl::StripPrefix(name, "HOST_STATE_"));
}

// One gauge of the service whose /metrics is at `address`, by the value of its `label`.
absl::StatusOr<std::map<std::string, double>> GaugeByLabel(const std::string& address, const std::string& name,
                                                           const std::string& label) {
  auto text = http::HttpGet(address, "/metrics");
  if (!text.ok()) return text.status();
  auto metrics = http::ParsePrometheusText(*text);
  if (!metrics.ok()) return metrics.status();
  std::map<std::string, double> out;
  for (const http::Sample& sample : metrics->samples) {
    auto it = sample.labels.find(label);
    if (sample.name == name && it != sample.labels.end()) out[it->second] = sample.value;
  }
  return out;
}

class Top {
 public:
  Top(const TopFlags& f, Scheduler scheduler) : f_(f), scheduler_(std::move(scheduler)) {
    if (!f.limiter.empty()) {
      if (auto ch = MakeChannel(f.limiter, f.conn.Channel()); ch.ok()) limiter_ = v1::RateLimiter::NewStub(*ch);
    }
    if (!f.proxy.empty()) {
      if (auto ch = MakeChannel(f.proxy, f.conn.Channel()); ch.ok()) proxy_ = v1::Proxy::NewStub(*ch);
    }
  }

  std::string Snapshot() const {
    std::string out = absl::StrCat("corral top — ", absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()),
                                   "  scheduler ", f_.conn.address, "\n\n");
    Hosts(out);
    Batches(out);
    Phases(out);
    Limiter(out);
    Proxy(out);
    return out;
  }

 private:
  void Hosts(std::string& out) const {
    grpc::ClientContext ctx;
    scheduler_.Prepare(ctx);
    v1::ListHostsRequest req;
    req.set_page_size(1000);
    v1::ListHostsResponse resp;
    if (grpc::Status st = scheduler_.stub->ListHosts(&ctx, req, &resp); !st.ok()) {
      absl::StrAppend(&out, "hosts: ", FromGrpcStatus(st).ToString(), "\n\n");
      return;
    }
    absl::StrAppendFormat(&out, "%-16s %-22s %-9s %8s %6s %6s %8s %6s %6s  %s\n", "HOST", "ADDRESS", "STATE",
                          "CAPACITY", "LIVE", "FREE", "RUNNING", "WARM", "LEASED", "LAST ERROR");
    uint32_t capacity = 0, live = 0, running = 0, leased = 0;
    for (const v1::Host& h : resp.hosts()) {
      absl::StrAppendFormat(&out, "%-16s %-22s %-9s %8d %6d %6d %8d %6d %6d  %s\n", h.host_id(), h.address(),
                            HostStateName(h.state()), h.capacity(), h.live(), h.free(), h.running_episodes(),
                            h.warm_sandboxes(), h.leased_sandboxes(), h.last_error().substr(0, 40));
      capacity += h.capacity();
      live += h.live();
      running += h.running_episodes();
      leased += h.leased_sandboxes();
    }
    if (resp.hosts().empty()) absl::StrAppend(&out, "(no sandbox hosts: single_turn episodes only)\n");
    absl::StrAppendFormat(&out, "%d host(s): %d of %d sandboxes live, %d episodes running on them, %d leased\n\n",
                          resp.hosts_size(), live, capacity, running, leased);
  }

  void Batches(std::string& out) const {
    grpc::ClientContext ctx;
    scheduler_.Prepare(ctx);
    v1::ListBatchesRequest req;
    req.set_page_size(20);
    req.set_state(v1::BATCH_STATE_RUNNING);
    v1::ListBatchesResponse resp;
    if (grpc::Status st = scheduler_.stub->ListBatches(&ctx, req, &resp); !st.ok()) {
      absl::StrAppend(&out, "batches: ", FromGrpcStatus(st).ToString(), "\n\n");
      return;
    }
    absl::StrAppendFormat(&out, "%-30s %9s %7s %7s %7s %7s %8s\n", "RUNNING BATCH", "EPISODES", "ENDED", "RUNNING",
                          "QUEUED", "FAILED", "REWARD");
    for (const v1::Batch& b : resp.batches()) {
      const v1::EpisodeCounts& c = b.counts();
      absl::StrAppendFormat(&out, "%-30s %9d %7d %7d %7d %7d %8s\n", b.batch_id(), c.total(), EndedEpisodes(c),
                            c.running(), c.queued(), c.failed() + c.timeout(),
                            b.has_mean_reward() ? absl::StrFormat("%.3f", b.mean_reward()) : "-");
    }
    if (resp.batches().empty()) absl::StrAppend(&out, "(none running)\n");
    absl::StrAppend(&out, "\n");
  }

  // What the running episodes are doing, from the scheduler's corral_scheduler_running_by_phase gauge.
  void Phases(std::string& out) const {
    if (f_.scheduler_metrics.empty()) return;
    auto by_phase = GaugeByLabel(f_.scheduler_metrics, "corral_scheduler_running_by_phase", "phase");
    if (!by_phase.ok()) {
      absl::StrAppend(&out, "episodes by phase: ", by_phase.status().ToString(), "\n\n");
      return;
    }
    std::string line;
    for (const char* phase : {"acquire", "setup", "agent", "tool", "verifier", "reward"}) {  // an episode's order
      auto it = by_phase->find(phase);
      if (it != by_phase->end()) {
        absl::StrAppend(&line, line.empty() ? "" : " · ", phase, " ", static_cast<int64_t>(it->second));
      }
    }
    if (!line.empty()) absl::StrAppend(&out, "running episodes by phase: ", line, "\n\n");
  }

  void Limiter(std::string& out) const {
    if (limiter_ == nullptr) return;
    grpc::ClientContext ctx;
    scheduler_.Prepare(ctx);
    v1::GetStatusRequest req;
    v1::GetStatusResponse resp;
    if (grpc::Status st = limiter_->GetStatus(&ctx, req, &resp); !st.ok()) {
      absl::StrAppend(&out, "ratelimiter: ", FromGrpcStatus(st).ToString(), "\n\n");
      return;
    }
    absl::StrAppendFormat(&out, "%-30s %10s %8s %8s %12s   ratelimiter %s, %d session(s)%s\n", "LIMIT", "IN USE",
                          "LEASES", "WAITERS", "OLDEST WAIT", f_.limiter, resp.sessions(),
                          resp.learning_mode() ? ", learning mode" : "");
    for (const v1::LimitStatus& l : resp.limits()) {
      absl::StrAppendFormat(&out, "%-30s %10s %8d %8d %12s\n",
                            l.key().empty() ? l.limit() : absl::StrCat(l.limit(), "/", l.key()),
                            absl::StrCat(l.in_use(), "/", l.capacity()), l.leases(), l.waiters(),
                            l.waiters() > 0 ? ShortDuration(FromProto(l.oldest_waiter_age())) : "-");
    }
    absl::StrAppend(&out, "\n");
  }

  void Proxy(std::string& out) const {
    if (proxy_ != nullptr) {
      int open = 0;
      std::string token;
      absl::Status failed;
      do {
        grpc::ClientContext ctx;
        scheduler_.Prepare(ctx);
        v1::ListSessionsRequest req;
        req.set_page_size(1000);
        req.set_page_token(token);
        req.set_state(v1::SESSION_STATE_OPEN);
        v1::ListSessionsResponse resp;
        if (grpc::Status st = proxy_->ListSessions(&ctx, req, &resp); !st.ok()) {
          failed = FromGrpcStatus(st);
          break;
        }
        open += resp.sessions_size();
        token = resp.next_page_token();
      } while (!token.empty());
      if (!failed.ok()) {
        absl::StrAppend(&out, "proxy: ", failed.ToString(), "\n");
      } else {
        absl::StrAppend(&out, "proxy ", f_.proxy, ": ", open, " open session(s)\n");
      }
    }
    if (f_.proxy_metrics.empty()) return;
    auto healthy = GaugeByLabel(f_.proxy_metrics, "corral_proxy_upstream_healthy", "upstream");
    if (!healthy.ok()) {
      absl::StrAppend(&out, "upstreams: ", healthy.status().ToString(), "\n");
      return;
    }
    for (const auto& [upstream, value] : *healthy) {
      absl::StrAppend(&out, "  upstream ", upstream, ": ", value == 1 ? "healthy" : "UNHEALTHY", "\n");
    }
  }

  const TopFlags& f_;
  Scheduler scheduler_;
  std::unique_ptr<v1::RateLimiter::Stub> limiter_;
  std::unique_ptr<v1::Proxy::Stub> proxy_;
};

int RunTop(TopFlags& f) {
  const bool local = f.conn.address.empty();
  auto s = ConnectScheduler(f.conn);
  if (!s.ok()) return Fail("top", s.status());
  if (local) {  // the rest of the local cluster too, unless named
    if (f.limiter.empty()) f.limiter = LocalClusterAddress(f.conn.cluster_dir, "ratelimiter", "grpc");
    if (f.proxy.empty()) f.proxy = LocalClusterAddress(f.conn.cluster_dir, "proxy", "grpc");
    if (f.proxy_metrics.empty()) f.proxy_metrics = LocalClusterAddress(f.conn.cluster_dir, "proxy", "metrics");
    if (f.scheduler_metrics.empty())
      f.scheduler_metrics = LocalClusterAddress(f.conn.cluster_dir, "scheduler", "metrics");
  }
  Top top(f, *std::move(s));
  const bool tty = isatty(STDOUT_FILENO);
  while (true) {
    const std::string snapshot = top.Snapshot();
    if (f.once) {
      std::cout << snapshot;
      return 0;
    }
    std::cout << (tty ? "\033[H\033[2J" : "\n") << snapshot << std::flush;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(f.interval_s * 1000)));
  }
}

}  // namespace

void RegisterTop(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<TopFlags>();
  CLI::App* top = app.add_subcommand("top", "live view of the cluster: hosts, running batches, limits, proxy");
  AddConnectFlags(top, f->conn, "scheduler", "--scheduler", "scheduler");
  top->add_option("--limiter", f->limiter, "HOST:PORT of the ratelimiter (default: the local cluster's)");
  top->add_option("--proxy", f->proxy, "HOST:PORT of the proxy's gRPC (default: the local cluster's)");
  top->add_option("--proxy-metrics", f->proxy_metrics, "HOST:PORT of the proxy's /metrics, for upstream health");
  top->add_option(
      "--scheduler-metrics", f->scheduler_metrics,
      "HOST:PORT of the scheduler's /metrics, for running episodes by phase (default: the local cluster's)");
  top->add_option("--interval", f->interval_s, "seconds between refreshes")->capture_default_str();
  top->add_flag("--once", f->once, "print one snapshot and exit");
  top->callback([f, &exit_code] { exit_code = RunTop(*f); });
}

}  // namespace corral::cli
