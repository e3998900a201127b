// The proxy's parts below its HTTP handler, wired as the proxy's root wires them, on a FakeClock: journal,
// sessions and their ledger, the upstream pool and dispatcher, the generation gate. The base of the handler's and
// UpstreamCall's test fixtures; `io_` comes first, so it is destroyed after everything bound to its context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "libs/core/testing/fake_clock.h"
#include "libs/core/token.h"
#include "prometheus/registry.h"
#include "services/proxy/generation_gate.h"
#include "services/proxy/metrics.h"
#include "services/proxy/proxy_journal.h"
#include "services/proxy/session_ledger.h"
#include "services/proxy/sessions.h"
#include "services/proxy/upstream_call.h"
#include "services/proxy/upstream_dispatcher.h"
#include "services/proxy/upstreams.h"
#include "tests/support/io_thread.h"
#include "tests/support/subprocess.h"

namespace corral::proxy::testing {

class ProxyCore {
 protected:
  // (Re)makes the journal (a fresh test directory), sessions, ledger, a pool of `upstreams` and its dispatcher.
  void BuildCore(std::vector<UpstreamSpec> upstreams, RelayOptions relay) {
    journal_ = *ProxyJournal::Open(corral::testing::MakeTestDir() + "/proxy.db", false);
    store_ = std::make_unique<SessionStore>(SessionLimits{}, &signer_, &clock_);
    ledger_ = std::make_unique<SessionLedger>(store_.get(), journal_.get(), &metrics_, &clock_);
    pool_ = std::make_unique<UpstreamPool>(std::move(upstreams), &clock_);
    dispatcher_ = std::make_unique<UpstreamDispatcher>(pool_.get(), &metrics_, &clock_, relay);
  }
  // What an upstream call stands on, as the handler hands it over.
  CallParts Parts() {
    return CallParts{.ledger = ledger_.get(),
                     .dispatcher = dispatcher_.get(),
                     .metrics = &metrics_,
                     .clock = &clock_,
                     .policy_version = &policy_version_,
                     .gate = &gate_};
  }

  corral::testing::IoThread io_;
  FakeClock clock_;
  TokenSigner signer_ = *TokenSigner::FromKey("0123456789abcdef0123456789abcdef");
  prometheus::Registry registry_;
  ProxyMetrics metrics_{registry_};
  std::unique_ptr<ProxyJournal> journal_;
  std::unique_ptr<SessionStore> store_;
  std::unique_ptr<SessionLedger> ledger_;
  std::unique_ptr<UpstreamPool> pool_;
  std::unique_ptr<UpstreamDispatcher> dispatcher_;
  PolicyVersion policy_version_;
  GenerationGate gate_{&policy_version_, &metrics_, &clock_};
};

}  // namespace corral::proxy::testing
