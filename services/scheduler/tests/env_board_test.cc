// The board where a trainer's environment calls meet the episode's runner: each call answered exactly once,
// one step at a time, bad input refused before anything reaches the runner, and an episode's end reaching
// whoever waits. Plus OpenEnvironment's request turned into a batch.
#include "services/scheduler/episode/env_board.h"

#include <optional>

#include "boost/asio/io_context.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "services/scheduler/table/open_environment.h"

namespace corral::scheduler {
namespace {

using ::testing::HasSubstr;

// What a trainer's call got, once.
template <class T>
struct Answer {
  int calls = 0;
  std::optional<absl::StatusOr<T>> out;
  std::function<void(absl::StatusOr<T>)> Callback() {
    return [this](absl::StatusOr<T> o) {
      ++calls;
      out = std::move(o);
    };
  }
};

v1::EpisodeResult Result(const std::string& id, v1::EpisodeStatus status, v1::FailureClass failure_class,
                         const std::string& message) {
  v1::EpisodeResult r;
  r.mutable_ids()->set_episode_id(id);
  r.set_status(status);
  r.set_failure_class(failure_class);
  r.set_failure_message(message);
  return r;
}

// The command waiting on the runner's channel, if any.
std::optional<EnvCommand> Take(EnvBoard::Channel& channel) {
  std::optional<EnvCommand> got;
  channel.try_receive([&](boost::system::error_code ec, EnvCommand c) {
    if (!ec) got = std::move(c);
  });
  return got;
}

class EnvBoardTest : public ::testing::Test {
 protected:
  // Expects "e" and opens it; returns the runner's channel.
  std::shared_ptr<EnvBoard::Channel> Open() {
    EXPECT_TRUE(board_.Expect("e", absl::Minutes(5), opened_.Callback()).ok());
    EXPECT_EQ(board_.Expected("e"), absl::Minutes(5));
    v1::OpenEnvironmentResponse response;
    response.mutable_ids()->set_episode_id("e");
    response.set_api_key("token");
    return board_.Opened("e", response, io_.get_executor());
  }

  FakeClock clock_;
  boost::asio::io_context io_;
  EnvBoard board_{&clock_};
  Answer<v1::OpenEnvironmentResponse> opened_;
};

TEST_F(EnvBoardTest, TheTrainerOpensStepsAndClosesOneCallAtATime) {
  Answer<v1::EnvironmentStep> early;
  ASSERT_TRUE(board_.Expect("e", absl::Minutes(5), opened_.Callback()).ok());
  EXPECT_EQ(board_.Step("e", "{}", early.Callback()).code(), absl::StatusCode::kFailedPrecondition)
      << "no step before the reset";
  EXPECT_EQ(board_.Expect("e", absl::Minutes(1), opened_.Callback()).code(), absl::StatusCode::kAlreadyExists);
  v1::OpenEnvironmentResponse response;
  response.set_api_key("token");
  auto channel = board_.Opened("e", response, io_.get_executor());
  ASSERT_NE(channel, nullptr);
  ASSERT_EQ(opened_.calls, 1);
  ASSERT_TRUE(opened_.out->ok());
  EXPECT_EQ((*opened_.out)->api_key(), "token");
  EXPECT_EQ(board_.Expected("e"), std::nullopt) << "open: a restarted runner would not find a trainer waiting";

  Answer<v1::EnvironmentStep> step;
  ASSERT_TRUE(board_.Step("e", R"({"message": "42"})", step.Callback()).ok());
  Answer<v1::EnvironmentStep> second;
  EXPECT_THAT(board_.Step("e", "{}", second.Callback()).message(), HasSubstr("a step is under way"));
  Answer<v1::EpisodeResult> closing;
  EXPECT_EQ(board_.Close("e", "", closing.Callback()).code(), absl::StatusCode::kFailedPrecondition);
  auto command = Take(*channel);
  ASSERT_TRUE(command.has_value());
  EXPECT_FALSE(command->close);
  EXPECT_EQ(command->action_json, R"({"message": "42"})");
  EXPECT_EQ(Take(*channel), std::nullopt) << "the refused calls sent nothing";
  v1::EnvironmentStep answer;
  answer.set_turn(1);
  answer.set_reward(1);
  board_.Answer("e", answer);
  ASSERT_EQ(step.calls, 1);
  EXPECT_EQ((*step.out)->turn(), 1u);
  EXPECT_EQ(second.calls + closing.calls + early.calls, 0) << "refused calls are never answered";

  Answer<v1::EpisodeResult> closed;
  ASSERT_TRUE(board_.Close("e", "the end", closed.Callback()).ok());
  command = Take(*channel);
  ASSERT_TRUE(command.has_value());
  EXPECT_TRUE(command->close);
  EXPECT_EQ(command->final_message, "the end");
  EXPECT_EQ(closed.calls, 0) << "the close waits for the result";
  board_.Ended(Result("e", v1::EPISODE_STATUS_FINISHED, v1::FAILURE_CLASS_UNSPECIFIED, ""));
  ASSERT_EQ(closed.calls, 1);
  EXPECT_EQ((*closed.out)->status(), v1::EPISODE_STATUS_FINISHED);
  EXPECT_EQ(board_.size(), 0u) << "the trainer took the result: nothing is kept";
  EXPECT_EQ(opened_.calls, 1);
}

TEST_F(EnvBoardTest, BadActionsAndUnknownEpisodesAreRefusedAndChangeNothing) {
  auto channel = Open();
  Answer<v1::EnvironmentStep> step;
  EXPECT_EQ(board_.Step("e", "", step.Callback()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(board_.Step("e", "{\"message\": ", step.Callback()).message(), HasSubstr("action_json is not JSON"));
  EXPECT_EQ(board_.Step("e", std::string(2 << 20, ' '), step.Callback()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(board_.Step("nobody", "{}", step.Callback()).code(), absl::StatusCode::kNotFound);
  Answer<v1::EpisodeResult> closed;
  EXPECT_EQ(board_.Close("nobody", "", closed.Callback()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Take(*channel), std::nullopt);
  EXPECT_EQ(step.calls + closed.calls, 0);
  // A valid step still goes through afterwards.
  ASSERT_TRUE(board_.Step("e", "7", step.Callback()).ok());
  EXPECT_EQ(Take(*channel)->action_json, "7");
}

TEST_F(EnvBoardTest, AnEndAnswersTheWaitingStepAndKeepsTheResultForTheClose) {
  auto channel = Open();
  Answer<v1::EnvironmentStep> step;
  ASSERT_TRUE(board_.Step("e", "{}", step.Callback()).ok());
  board_.Ended(Result("e", v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA, "POST /step: the server exited"));
  ASSERT_EQ(step.calls, 1);
  EXPECT_EQ(step.out->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(step.out->status().message(), HasSubstr("the server exited"));
  // A later step hears the same; the close gets the result, once.
  Answer<v1::EnvironmentStep> later;
  EXPECT_EQ(board_.Step("e", "{}", later.Callback()).code(), absl::StatusCode::kUnavailable);
  Answer<v1::EpisodeResult> closed;
  ASSERT_TRUE(board_.Close("e", "", closed.Callback()).ok());
  ASSERT_EQ(closed.calls, 1);
  EXPECT_EQ((*closed.out)->failure_message(), "POST /step: the server exited");
  EXPECT_EQ(board_.Close("e", "", closed.Callback()).code(), absl::StatusCode::kNotFound);
}

TEST_F(EnvBoardTest, AnEpisodeThatEndsBeforeItsResetAnswersTheOpenWithItsError) {
  ASSERT_TRUE(board_.Expect("e", absl::Minutes(5), opened_.Callback()).ok());
  board_.Ended(Result("e", v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_ENVIRONMENT, "the field 'done' is bad"));
  ASSERT_EQ(opened_.calls, 1);
  EXPECT_EQ(opened_.out->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(opened_.out->status().message(), HasSubstr("the field 'done' is bad"));
  EXPECT_EQ(board_.size(), 0u);
}

TEST_F(EnvBoardTest, AForgottenOpenIsNeverAnsweredAndItsRunnerFindsNoTrainer) {
  ASSERT_TRUE(board_.Expect("e", absl::Minutes(5), opened_.Callback()).ok());
  EXPECT_TRUE(board_.Forget("e"));
  EXPECT_FALSE(board_.Forget("e"));
  EXPECT_EQ(board_.Expected("e"), std::nullopt);
  EXPECT_EQ(board_.Opened("e", v1::OpenEnvironmentResponse(), io_.get_executor()), nullptr);
  board_.Ended(Result("e", v1::EPISODE_STATUS_CANCELLED, v1::FAILURE_CLASS_UNSPECIFIED, "cancelled"));
  EXPECT_EQ(opened_.calls, 0);
  // Forget does nothing to an open episode: its trainer holds it.
  Open();
  EXPECT_FALSE(board_.Forget("e"));
  EXPECT_EQ(board_.size(), 1u);
}

TEST_F(EnvBoardTest, AnEndedResultNobodyClosesIsDroppedAfterTenMinutes) {
  Open();
  board_.Ended(Result("e", v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT, "idle"));
  clock_.Advance(absl::Minutes(9));
  ASSERT_TRUE(board_.Expect("f", absl::Minutes(1), opened_.Callback()).ok());
  EXPECT_EQ(board_.size(), 2u);
  clock_.Advance(absl::Minutes(2));
  ASSERT_TRUE(board_.Expect("g", absl::Minutes(1), opened_.Callback()).ok());
  EXPECT_EQ(board_.size(), 2u) << "e was pruned; f and g wait";
}

TEST(EndedStatusTest, EachWayAnEpisodeEndsHasItsCode) {
  auto code = [](v1::EpisodeStatus s, v1::FailureClass c) { return EndedStatus(Result("e", s, c, "why")).code(); };
  EXPECT_EQ(code(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_INFRA), absl::StatusCode::kUnavailable);
  EXPECT_EQ(code(v1::EPISODE_STATUS_FAILED, v1::FAILURE_CLASS_ENVIRONMENT), absl::StatusCode::kAborted);
  EXPECT_EQ(code(v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(code(v1::EPISODE_STATUS_CANCELLED, v1::FAILURE_CLASS_UNSPECIFIED), absl::StatusCode::kCancelled);
  EXPECT_EQ(code(v1::EPISODE_STATUS_FINISHED, v1::FAILURE_CLASS_UNSPECIFIED), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(EndedStatus(Result("e", v1::EPISODE_STATUS_TIMEOUT, v1::FAILURE_CLASS_AGENT, "idle")).message(),
              HasSubstr("the episode ended EPISODE_STATUS_TIMEOUT: idle"));
}

// ---- OpenEnvironment's batch

v1::OpenEnvironmentRequest Request() {
  v1::OpenEnvironmentRequest r;
  v1::Task& t = *r.mutable_task();
  t.set_id("drill");
  t.mutable_env_server()->mutable_command()->add_argv("server");
  t.mutable_env_server()->set_unix_socket("env.sock");
  t.mutable_env_server()->set_reset_json(R"({"questions": 3, "level": "easy"})");
  return r;
}

TEST(TrainerDrivenBatchTest, TheTaskBecomesATrainerDrivenEnvironmentTaskOfOneEpisode) {
  v1::OpenEnvironmentRequest r = Request();
  r.set_seed(42);
  r.set_reset_json(R"({"level": "hard"})");
  r.mutable_idle_timeout()->set_seconds(30);
  r.mutable_spec()->set_batch_id("mine");
  auto b = TrainerDrivenBatchOf(r);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->task.runner(), v1::RUNNER_ENVIRONMENT);
  EXPECT_TRUE(b->task.env_server().trainer_driven());
  EXPECT_EQ(b->task.env_server().reset_json(), R"({"questions":3,"level":"hard","seed":42})");
  EXPECT_EQ(b->spec.group_size(), 1u);
  EXPECT_EQ(b->spec.batch_id(), "mine");
  EXPECT_EQ(b->idle_timeout, absl::Seconds(30));
  EXPECT_EQ(TrainerDrivenBatchOf(Request())->idle_timeout, kDefaultIdleTimeout);
}

TEST(TrainerDrivenBatchTest, RequestsThatAreNotOneEnvironmentEpisodeAreRefusedNamingTheField) {
  auto refused = [](const std::function<void(v1::OpenEnvironmentRequest&)>& change) {
    v1::OpenEnvironmentRequest r = Request();
    change(r);
    auto b = TrainerDrivenBatchOf(r);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(b.status().message());
  };
  EXPECT_THAT(refused([](auto& r) { r.clear_task(); }), HasSubstr("task is required"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_task()->clear_env_server(); }), HasSubstr("task.env_server"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_task()->set_runner(v1::RUNNER_TOOL_LOOP); }), HasSubstr("task.runner"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_spec()->set_group_size(4); }), HasSubstr("spec.group_size"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_spec()->set_redundancy(1); }), HasSubstr("spec.group_size"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_spec()->set_groups_in_flight(2); }), HasSubstr("streaming"));
  EXPECT_THAT(refused([](auto& r) { r.set_reset_json("[1]"); }), HasSubstr("reset_json must be a JSON object"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_task()->mutable_env_server()->set_reset_json("{"); }),
              HasSubstr("task.env_server.reset_json"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_idle_timeout()->set_seconds(-1); }), HasSubstr("idle_timeout"));
  EXPECT_THAT(refused([](auto& r) { r.mutable_idle_timeout()->set_seconds(2 * 86400); }), HasSubstr("idle_timeout"));
}

}  // namespace
}  // namespace corral::scheduler
