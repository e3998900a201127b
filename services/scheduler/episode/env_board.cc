#include "services/scheduler/episode/env_board.h"

#include "absl/strings/str_cat.h"
#include "boost/json.hpp"

namespace corral::scheduler {

namespace {

constexpr absl::Duration kKeepEnded = absl::Minutes(10);
constexpr size_t kMaxActionBytes = 1 << 20;

}  // namespace

absl::Status EndedStatus(const v1::EpisodeResult& result) {
  const std::string message = absl::StrCat("the episode ended ", v1::EpisodeStatus_Name(result.status()),
                                           result.failure_message().empty() ? "" : ": ", result.failure_message());
  switch (result.status()) {
    case v1::EPISODE_STATUS_TIMEOUT: return absl::DeadlineExceededError(message);
    case v1::EPISODE_STATUS_CANCELLED: return absl::CancelledError(message);
    case v1::EPISODE_STATUS_FAILED:
      return result.failure_class() == v1::FAILURE_CLASS_INFRA ? absl::UnavailableError(message)
                                                               : absl::AbortedError(message);
    default: return absl::FailedPreconditionError(message);
  }
}

absl::Status EnvBoard::Expect(const std::string& episode_id, absl::Duration idle_timeout, OpenDone opened) {
  absl::MutexLock lock(&mu_);
  Prune();
  auto [it, inserted] = entries_.try_emplace(episode_id);
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("environment episode '", episode_id, "' is open already"));
  }
  it->second.idle_timeout = idle_timeout;
  it->second.opened = std::move(opened);
  return absl::OkStatus();
}

bool EnvBoard::Forget(const std::string& episode_id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(episode_id);
  if (it == entries_.end() || it->second.state != State::kOpening) return false;
  entries_.erase(it);
  return true;
}

absl::StatusOr<EnvBoard::Entry*> EnvBoard::Ready(const std::string& episode_id, const char* what) {
  auto it = entries_.find(episode_id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("no open environment episode '", episode_id, "'"));
  }
  Entry& e = it->second;
  if (e.state == State::kOpening) {
    return absl::FailedPreconditionError(
        absl::StrCat("environment episode '", episode_id, "' is not open yet (OpenEnvironment has not answered)"));
  }
  if (e.step || e.close) {
    return absl::FailedPreconditionError(absl::StrCat("environment episode '", episode_id, "': a ",
                                                      e.close ? "close" : "step", " is under way; one ", what,
                                                      " at a time"));
  }
  return &e;
}

absl::Status EnvBoard::Step(const std::string& episode_id, std::string action_json, StepDone done) {
  if (action_json.empty()) return absl::InvalidArgumentError("action_json is required");
  if (action_json.size() > kMaxActionBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("action_json is ", action_json.size(), " bytes; at most ", kMaxActionBytes));
  }
  boost::system::error_code ec;
  (void)boost::json::parse(action_json, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("action_json is not JSON: ", ec.message()));
  absl::MutexLock lock(&mu_);
  auto entry = Ready(episode_id, "step");
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  if (e.state == State::kEnded) return EndedStatus(*e.result);
  e.step = std::move(done);
  e.commands->try_send(boost::system::error_code(), EnvCommand{.action_json = std::move(action_json)});
  return absl::OkStatus();
}

absl::Status EnvBoard::Close(const std::string& episode_id, std::string final_message, CloseDone done) {
  std::optional<v1::EpisodeResult> ended;
  {
    absl::MutexLock lock(&mu_);
    auto entry = Ready(episode_id, "close");
    if (!entry.ok()) return entry.status();
    Entry& e = **entry;
    if (e.state == State::kEnded) {
      ended = std::move(e.result);
      entries_.erase(episode_id);
    } else {
      e.close = std::move(done);
      e.commands->try_send(boost::system::error_code(),
                           EnvCommand{.close = true, .final_message = std::move(final_message)});
    }
  }
  if (ended) done(*std::move(ended));
  return absl::OkStatus();
}

std::optional<absl::Duration> EnvBoard::Expected(const std::string& episode_id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(episode_id);
  if (it == entries_.end() || it->second.state != State::kOpening) return std::nullopt;
  return it->second.idle_timeout;
}

std::shared_ptr<EnvBoard::Channel> EnvBoard::Opened(const std::string& episode_id,
                                                    const v1::OpenEnvironmentResponse& response,
                                                    const boost::asio::any_io_executor& executor) {
  OpenDone opened;
  std::shared_ptr<Channel> commands;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(episode_id);
    if (it == entries_.end() || it->second.state != State::kOpening) return nullptr;
    Entry& e = it->second;
    e.state = State::kOpen;
    // Room for one command: the trainer's calls go one at a time (Ready refuses a second).
    e.commands = std::make_shared<Channel>(executor, 1);
    commands = e.commands;
    opened = std::move(e.opened);
  }
  opened(response);
  return commands;
}

void EnvBoard::Answer(const std::string& episode_id, absl::StatusOr<v1::EnvironmentStep> step) {
  StepDone done;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(episode_id);
    if (it == entries_.end() || !it->second.step) return;
    done = std::move(it->second.step);
    it->second.step = nullptr;
  }
  done(std::move(step));
}

void EnvBoard::Ended(const v1::EpisodeResult& result) {
  const std::string& episode_id = result.ids().episode_id();
  OpenDone opened;
  StepDone step;
  CloseDone close;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(episode_id);
    if (it == entries_.end() || it->second.state == State::kEnded) return;
    Entry& e = it->second;
    opened = std::move(e.opened);
    step = std::move(e.step);
    close = std::move(e.close);
    if (close || e.state == State::kOpening) {
      entries_.erase(it);  // nobody will ask for this result here (a failed open answers with its error)
    } else {
      e.state = State::kEnded;
      e.step = nullptr;
      e.result = result;
      e.ended_at = clock_->Now();
    }
  }
  if (opened) opened(EndedStatus(result));
  if (step) step(EndedStatus(result));
  if (close) close(result);
}

size_t EnvBoard::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

void EnvBoard::Prune() {
  const absl::Time now = clock_->Now();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.state == State::kEnded && now - it->second.ended_at > kKeepEnded) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace corral::scheduler
