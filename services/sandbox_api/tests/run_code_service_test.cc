// /run_code's path around the runner, against an in-memory scheduler (leases), host and limiter: the image per
// language, the permit and the lease each released once the answer is out, and what a caller gets when there is
// no permit, no sandbox or no request at all — a refusal takes nothing.
#include "services/sandbox_api/run_code_service.h"

#include "absl/strings/str_cat.h"
#include "boost/asio/use_awaitable.hpp"
#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/async/testing/poll_await.h"
#include "libs/core/testing/fake_clock.h"
#include "services/ratelimiter/client/testing/fake_limiter.h"
#include "services/sandbox_api/testing/fake_leases.h"
#include "services/sandbox_host/client/testing/fake_host.h"

namespace corral::sandbox_api {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using sandbox::FakeHost;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using testing_support::FakeLeases;

class RunCodeServiceTest : public ::testing::Test {
 protected:
  RunCodeServiceTest() {
    host_->OnExec([](const std::string&, const v1::ExecRequest&) {
      sandbox::ExecOutcome out;
      out.exited = true;
      out.stdout_head = "1\n";
      return out;
    });
  }
  // The answer, then whatever the service left running in the background (the lease's release), polled to its
  // end on this thread.
  HttpAnswer Call(const std::string& body) {
    HttpAnswer answer = async::PollAwait(io_, service_.RunCode(body), [this] { clock_.RunDue(); });
    async::PollIdle(io_, [this] { clock_.RunDue(); });
    return answer;
  }
  static std::string Payload(const std::string& language) {
    return absl::StrCat(R"j({"code": "print(1)", "language": ")j", language, R"j(", "run_timeout": 5})j");
  }

  asio::io_context io_;
  FakeClock clock_;
  std::shared_ptr<sandbox::FakeHost> host_ = std::make_shared<sandbox::FakeHost>("host-a:1", &clock_);
  FakeLeases leases_{host_};
  ratelimiter::FakeLimiter limiter_;
  RunCodeService service_{&leases_, &limiter_, &clock_,
                          RunCodeOptions{.limit = "code_exec", .image = "base:1", .images = {{"cpp", "gcc:12"}}}};
};

TEST_F(RunCodeServiceTest, EachRunLeasesASandboxOfItsLanguagesImageAndGivesBackPermitAndLease) {
  HttpAnswer py = Call(Payload("python"));
  EXPECT_EQ(py.status, 200);
  EXPECT_THAT(py.body, HasSubstr(R"("status":"Success")"));
  HttpAnswer cpp = Call(Payload("cpp"));
  EXPECT_EQ(cpp.status, 200);
  const auto requests = leases_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].environment().image(), "base:1");
  EXPECT_EQ(requests[1].environment().image(), "gcc:12");
  EXPECT_EQ(requests[0].environment().network_policy(), v1::NETWORK_POLICY_NONE);
  EXPECT_EQ(requests[0].owner(), "run_code");
  // The lease outlives the run by a minute at most: its ttl is the run's timeouts (10 + 5 s) and 60 s.
  EXPECT_EQ(requests[0].ttl().seconds(), 75);
  EXPECT_EQ(limiter_.granted("code_exec"), 2);
  EXPECT_EQ(limiter_.held("code_exec"), 0);
  // The leases are released after the answers (in the background), and their sandboxes are gone.
  EXPECT_EQ(leases_.released().size(), 2u);
  EXPECT_THAT(host_->live(), IsEmpty());
}

TEST_F(RunCodeServiceTest, NoPermitOrNoRoomInTimeIs504WhatVerlRetriesAndAnyOtherRefusalIs503) {
  limiter_.Refuse(absl::DeadlineExceededError("waited 2m"));
  HttpAnswer busy = Call(Payload("python"));
  EXPECT_EQ(busy.status, 504);
  EXPECT_THAT(busy.body, HasSubstr("no code_exec permit: waited 2m"));
  EXPECT_THAT(leases_.requests(), IsEmpty());

  limiter_.Refuse(absl::NotFoundError("limit 'code_exec' not found"));
  EXPECT_EQ(Call(Payload("python")).status, 503);

  limiter_.Refuse(absl::OkStatus());
  leases_.Refuse(absl::DeadlineExceededError("no room within 2m"));
  HttpAnswer full = Call(Payload("python"));
  EXPECT_EQ(full.status, 504);
  EXPECT_THAT(full.body, HasSubstr("no sandbox: no room within 2m"));
  leases_.Refuse(absl::FailedPreconditionError("no host offers image base:1"));
  HttpAnswer none = Call(Payload("python"));
  EXPECT_EQ(none.status, 503);
  EXPECT_THAT(none.body, HasSubstr("no host offers image base:1"));
  EXPECT_EQ(limiter_.held("code_exec"), 0);  // every permit taken was given back
  EXPECT_THAT(host_->live(), IsEmpty());
}

TEST_F(RunCodeServiceTest, ALeasedSandboxWhoseHostCannotBeReachedIsASandboxErrorAndGivesEverythingBack) {
  leases_.Unreachable(absl::UnavailableError("cannot reach the host of sandbox s1 at \"\": empty service address"));
  HttpAnswer answer = Call(Payload("python"));
  EXPECT_EQ(answer.status, 200);
  EXPECT_THAT(answer.body, HasSubstr(R"("status":"SandboxError")"));
  EXPECT_THAT(answer.body, HasSubstr("cannot reach the host of sandbox s1"));
  EXPECT_EQ(limiter_.held("code_exec"), 0);
  EXPECT_EQ(leases_.released().size(), 1u);
  EXPECT_THAT(host_->live(), IsEmpty());
}

TEST_F(RunCodeServiceTest, ABadRequestOrALanguageWithoutToolchainTakesNothing) {
  EXPECT_EQ(Call("{not json").status, 422);
  EXPECT_EQ(Call(R"({"code": "x", "language": "cobol"})").status, 422);
  HttpAnswer sql = Call(Payload("sql"));
  EXPECT_EQ(sql.status, 200);
  EXPECT_THAT(sql.body, HasSubstr(R"("status":"SandboxError")"));
  EXPECT_EQ(limiter_.granted("code_exec"), 0);
  EXPECT_THAT(leases_.requests(), IsEmpty());
}

}  // namespace
}  // namespace corral::sandbox_api
