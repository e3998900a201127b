#include "services/scheduler/testing/fake_proxy.h"

#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/json.hpp"
#include "services/sandbox_host/client/testing/fake_host.h"

namespace corral::scheduler::testing_support {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

LlmReply Completion(json::object message) {
  json::object choice{{"index", 0}, {"message", std::move(message)}, {"finish_reason", "stop"}};
  json::object body{{"id", "chatcmpl-fake"},
                    {"object", "chat.completion"},
                    {"model", "fake-model"},
                    {"choices", json::array{std::move(choice)}},
                    {"usage", json::object{{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}}};
  return LlmReply{200, json::serialize(body)};
}

}  // namespace

LlmReply ChatCompletion(const std::string& content) {
  return Completion(json::object{{"role", "assistant"}, {"content", content}});
}

LlmReply ToolCallCompletion(const std::string& name, const std::string& arguments_json) {
  json::object call{{"id", "call-1"},
                    {"type", "function"},
                    {"function", json::object{{"name", name}, {"arguments", arguments_json}}}};
  return Completion(json::object{{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array{call}}});
}

FakeProxy::FakeProxy(std::string address, Clock* clock) : address_(std::move(address)), clock_(clock) {}

void FakeProxy::FailOpens(absl::Status status, int n) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < n; ++i) open_failures_.push_back(status);
}
void FakeProxy::FailOpensOf(const std::string& prefix, absl::Status status) {
  absl::MutexLock lock(&mu_);
  open_failures_of_[prefix] = std::move(status);
}
void FakeProxy::ThrowOnOpen(bool on) {
  absl::MutexLock lock(&mu_);
  throw_on_open_ = on;
}
void FakeProxy::Reply(LlmReply reply) {
  absl::MutexLock lock(&mu_);
  replies_.push_back(std::move(reply));
}
void FakeProxy::HangCalls(bool hang) {
  absl::MutexLock lock(&mu_);
  hang_ = hang;
}
void FakeProxy::AgentCalled(const std::string& env_token) {
  absl::MutexLock lock(&mu_);
  ++calls_by_token_[env_token];
}
std::vector<v1::OpenSessionRequest> FakeProxy::opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}
std::vector<std::string> FakeProxy::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}
std::vector<std::string> FakeProxy::acked() const {
  absl::MutexLock lock(&mu_);
  return acked_;
}
std::vector<std::string> FakeProxy::bodies() const {
  absl::MutexLock lock(&mu_);
  return bodies_;
}
int FakeProxy::calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(bodies_.size());
}

asio::awaitable<absl::StatusOr<v1::OpenSessionResponse>> FakeProxy::Open(v1::OpenSessionRequest request,
                                                                         sandbox::CallOptions) {
  absl::MutexLock lock(&mu_);
  opened_.push_back(request);
  if (throw_on_open_) throw std::runtime_error("the fake proxy threw");
  for (const auto& [prefix, status] : open_failures_of_) {
    if (absl::StartsWith(request.env_id(), prefix)) co_return status;
  }
  if (!open_failures_.empty()) {
    absl::Status s = open_failures_.front();
    open_failures_.pop_front();
    co_return s;
  }
  v1::OpenSessionResponse response;
  response.set_env_token(absl::StrCat("token-", request.env_id()));
  response.set_base_url("http://127.0.0.1:4000/v1");
  response.set_model(request.model().empty() ? "fake-model" : request.model());
  co_return response;
}

v1::Trajectory FakeProxy::Recorded(const std::string& env_id) {
  v1::Trajectory t;
  t.set_env_id(env_id);
  t.set_format(v1::TRAJECTORY_FORMAT_CALLS);
  const int count = calls_by_token_[absl::StrCat("token-", env_id)];
  t.set_call_count(static_cast<uint32_t>(count));
  for (int i = 0; i < count; ++i) {  // bare calls: what a session counts, without their messages
    v1::LlmCall* call = t.add_calls();
    call->set_seq(static_cast<uint32_t>(i));
    call->set_call_id(absl::StrCat(env_id, "/", i));
    call->set_role(v1::CALL_ROLE_AGENT);
  }
  return t;
}

asio::awaitable<absl::StatusOr<v1::CloseSessionResponse>> FakeProxy::Close(const std::string& env_id,
                                                                           v1::TrajectoryFormat, absl::Duration) {
  absl::MutexLock lock(&mu_);
  closed_.push_back(env_id);
  v1::CloseSessionResponse response;
  *response.mutable_trajectory() = Recorded(env_id);
  co_return response;
}

asio::awaitable<absl::StatusOr<v1::Trajectory>> FakeProxy::Trajectory(const std::string& env_id, v1::TrajectoryFormat,
                                                                      absl::Duration) {
  absl::MutexLock lock(&mu_);
  co_return Recorded(env_id);
}

void FakeProxy::CloseAsync(const std::string& env_id) {
  absl::MutexLock lock(&mu_);
  closed_.push_back(env_id);
}

asio::awaitable<absl::Status> FakeProxy::Ack(const std::string& env_id, absl::Duration) {
  absl::MutexLock lock(&mu_);
  acked_.push_back(env_id);
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<v1::UpdatePolicyResponse>> FakeProxy::UpdatePolicy(v1::UpdatePolicyRequest, absl::Time) {
  co_return v1::UpdatePolicyResponse();
}
asio::awaitable<absl::StatusOr<v1::PauseGenerationResponse>> FakeProxy::Pause(v1::PauseGenerationRequest, absl::Time) {
  co_return v1::PauseGenerationResponse();
}
asio::awaitable<absl::StatusOr<v1::ResumeGenerationResponse>> FakeProxy::Resume(v1::ResumeGenerationRequest,
                                                                                absl::Time) {
  co_return v1::ResumeGenerationResponse();
}

asio::awaitable<absl::StatusOr<LlmReply>> FakeProxy::Post(const BaseUrl&, const std::string& env_token,
                                                          const std::string&, std::string body,
                                                          absl::Duration timeout) {
  LlmReply reply{200, ChatCompletion("ok").body};
  bool hang;
  {
    absl::MutexLock lock(&mu_);
    bodies_.push_back(body);
    ++calls_by_token_[env_token];
    hang = hang_;
    if (!replies_.empty()) {
      reply = replies_.front();
      if (replies_.size() > 1) replies_.pop_front();
    }
  }
  if (hang) co_return co_await Hang(*clock_, sandbox::CallOptions{nullptr, clock_->Now() + timeout});
  co_return reply;
}

}  // namespace corral::scheduler::testing_support
