#include "libs/async/spawn.h"

#include <memory>
#include <stdexcept>

#include "boost/asio/io_context.hpp"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"

namespace corral::async {
namespace {

namespace asio = boost::asio;

// Captures what spdlog prints while the test runs.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)), saved_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(saved_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> saved_;
};

TEST(SpawnTest, AThrowIsLoggedWithWhatFailedAndTheContextGoesOn) {
  LogCapture log;
  asio::io_context io;
  bool after = false;
  Spawn(
      io,
      []() -> asio::awaitable<void> {
        throw std::runtime_error("the dispatcher's bug");
        co_return;
      }(),
      "the dispatcher");
  Spawn(
      io,
      [&]() -> asio::awaitable<void> {
        after = true;
        co_return;
      }(),
      "the next one");
  io.run();
  EXPECT_TRUE(after);
  EXPECT_NE(log.text().find("the dispatcher failed: the dispatcher's bug"), std::string::npos) << log.text();
}

TEST(SurvivePassTest, AThrowingPassIsLoggedAndTheLoopGoesOn) {
  LogCapture log;
  int passes = 0;
  for (int k = 0; k < 3; ++k) {
    const bool ok = SurvivePass("the dispatcher's pass", [&] {
      ++passes;
      if (k == 1) throw std::runtime_error("a bad ticket");
    });
    EXPECT_EQ(ok, k != 1);
  }
  EXPECT_EQ(passes, 3);
  EXPECT_NE(log.text().find("the dispatcher's pass failed: a bad ticket; it goes on"), std::string::npos) << log.text();
}

TEST(SpawnTest, ACleanEndLogsNothing) {
  LogCapture log;
  asio::io_context io;
  Spawn(
      io, []() -> asio::awaitable<void> { co_return; }(), "quiet");
  io.run();
  EXPECT_EQ(log.text(), "");
}

}  // namespace
}  // namespace corral::async
