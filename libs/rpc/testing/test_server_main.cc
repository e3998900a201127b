// corral-test-server: the server runner wrapped around TestService, for integration tests of the runner.
#include <memory>

#include "corral/testing/v1/test_service.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "libs/core/logging.h"
#include "libs/rpc/server_runner.h"
#include "spdlog/spdlog.h"

namespace corral {
namespace {

using testing::v1::HoldEvent;
using testing::v1::HoldRequest;

// Writes "started", arms an alarm for hold_ms, writes "finished" when it fires, then finishes.
class HoldReactor final : public grpc::ServerWriteReactor<HoldEvent> {
 public:
  HoldReactor(grpc::CallbackServerContext* context, const HoldRequest* request) : context_(context) {
    if (request->hold_ms() < 0 || request->hold_ms() > 600000) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hold_ms must be in [0, 600000]"));
      return;
    }
    hold_ = std::chrono::milliseconds(request->hold_ms());
    event_.set_phase("started");
    StartWrite(&event_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok || finished_phase_) {
      Finish(ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    alarm_.Set(std::chrono::system_clock::now() + hold_, [this](bool fired) {
      if (!fired || context_->IsCancelled()) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "hold cancelled"));
        return;
      }
      finished_phase_ = true;
      event_.set_phase("finished");
      StartWrite(&event_);
    });
  }

  void OnCancel() override { alarm_.Cancel(); }
  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* context_;
  std::chrono::milliseconds hold_{0};
  HoldEvent event_;
  grpc::Alarm alarm_;
  bool finished_phase_ = false;
};

class TestServiceImpl final : public testing::v1::TestService::CallbackService {
  grpc::ServerWriteReactor<HoldEvent>* Hold(grpc::CallbackServerContext* context, const HoldRequest* request) override {
    return new HoldReactor(context, request);
  }
};

}  // namespace
}  // namespace corral

int main(int argc, char** argv) {
  corral::BlockShutdownSignals();
  corral::ServerConfig config;
  corral::ConfigSchema schema("corral-test-server", "Serves corral.testing.v1.TestService through the server runner.");
  corral::RegisterServerFlags(schema, &config);
  if (auto exit_code = corral::HandleCommandLine(schema, argc, argv)) return *exit_code;
  if (auto s = corral::InitLogging("test-server", config.log); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (auto secret = corral::LoadClusterSecret(config); !secret.ok()) {
    spdlog::error("cannot start: {}", secret.status().message());
    return 1;
  }
  corral::TestServiceImpl service;
  corral::ServerRunner runner("test-server", config);
  runner.AddService(&service, "corral.testing.v1.TestService");
  if (auto s = runner.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s.message());
    return 1;
  }
  runner.Wait();
  return 0;
}
