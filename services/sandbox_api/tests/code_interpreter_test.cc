// The code interpreter's core over an in-memory host whose kernels are scripted (what the real kernel,
// e2b/scripts/code_kernel.py, prints for a request), on a FakeClock polled on the test's thread: runs and their
// lines, turns, contexts, interrupts of a reader that left, and kernels that die or ignore the interrupt.
#include "services/sandbox_api/e2b/code_interpreter.h"

#include "boost/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/sandbox_api/testing/polled_sandbox.h"

namespace corral::sandbox_api {
namespace {

using sandbox::FakeInteractive;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing_support::RecordedStream;

constexpr char kHello[] = R"({"type": "stdout", "text": "hi\n"})";
constexpr char kTwo[] = R"({"type": "result", "text": "2", "is_main_result": true})";

// Lines as the kernel prints them.
std::string Lines(std::initializer_list<std::string> lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

class CodeInterpreterTest : public testing_support::PolledSandboxTest {
 protected:
  void SetUp() override {
    auto lease = LeaseOne();
    ASSERT_TRUE(lease.ok()) << lease.status();
    sandbox_ = EnvdSandbox{*lease, host_};
    // By default a kernel answers each request at once: "hi", the value 2, the end.
    Answer([](FakeInteractive& k, const std::string&) {
      k.Emit(Lines({kHello, kTwo, CodeInterpreter::kEndOfExecution}));
    });
  }
  void Answer(std::function<void(FakeInteractive&, const std::string&)> on_write,
              std::function<void(FakeInteractive&, int)> on_signal = {}) {
    host_->OnInteractive([on_write, on_signal](const v1::ExecRequest&) {
      return FakeInteractive::Script{.on_write = on_write, .on_signal = on_signal};
    });
  }
  static envd::ExecuteRequest Code(const std::string& code, const std::string& context = "") {
    envd::ExecuteRequest r;
    r.set_code(code);
    r.set_context_id(context);
    return r;
  }
  // Ended alone (SIGTERM, stdin closed), not by stopping its call: that would end all of the sandbox.
  static bool EndedAlone(const FakeInteractive& k) {
    return !k.signals().empty() && k.signals().back() == 15 && k.stdin_closed() && !k.stopped();
  }
  std::shared_ptr<FakeInteractive> Kernel(size_t i = 0) {
    auto all = host_->interactive();
    return i < all.size() ? all[i] : nullptr;
  }

  CodeInterpreter code_{&clock_, E2bOptions()};
  EnvdSandbox sandbox_;
};

TEST_F(CodeInterpreterTest, ARunStartsTheDefaultKernelAndSendsItsLinesButTheEnd) {
  RecordedStream out;
  envd::ExecuteRequest request = Code("1 + 1");
  (*request.mutable_env_vars())["ONLY_NOW"] = "yes";
  ASSERT_TRUE(Run(code_.Execute(sandbox_, request, out)).ok());
  EXPECT_THAT(out.events, ElementsAre(kHello, kTwo));
  ASSERT_NE(Kernel(), nullptr);
  const v1::Command& command = Kernel()->start().command();
  ASSERT_THAT(command.argv(), SizeIs(4));
  EXPECT_THAT(std::vector<std::string>(command.argv().begin(), command.argv().begin() + 3),
              ElementsAre("python3", "-u", "-c"));
  EXPECT_THAT(command.argv(3), HasSubstr("end_of_execution"));  // the kernel, compiled in
  EXPECT_EQ(command.cwd(), "/home/user");
  EXPECT_THAT(Kernel()->writes(), ElementsAre(R"({"code":"1 + 1","env_vars":{"ONLY_NOW":"yes"}})"
                                              "\n"));
  // The next run keeps the kernel (its state).
  RecordedStream again;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("x"), again)).ok());
  EXPECT_THAT(host_->interactive(), SizeIs(1));
  EXPECT_THAT(Kernel()->writes(), SizeIs(2));
  EXPECT_EQ(code_.kernels(), 1u);
  ASSERT_THAT(code_.ListContexts(sandbox_), SizeIs(1));
  EXPECT_EQ(code_.ListContexts(sandbox_)[0].id(), "default-python");
}

TEST_F(CodeInterpreterTest, LinesSplitAcrossWritesAreJoinedAndWhatIsNotJsonIsDropped) {
  Answer([](FakeInteractive& k, const std::string&) {
    k.Emit(R"({"type": "std)");
    k.Emit("out\", \"text\": \"x\"}\nnot json at all\n[1,2]\n");
    k.Emit(Lines({CodeInterpreter::kEndOfExecution}));
  });
  RecordedStream out;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("x"), out)).ok());
  EXPECT_THAT(out.events, ElementsAre(R"({"type": "stdout", "text": "x"})"));
}

TEST_F(CodeInterpreterTest, AQuietRunSendsKeepalivesOnTheClock) {
  Answer([](FakeInteractive&, const std::string&) {});  // the code runs on
  RecordedStream out;
  auto done = Spawn(code_.Execute(sandbox_, Code("import time; time.sleep(5)"), out));
  Poll();
  EXPECT_THAT(out.events, IsEmpty());
  clock_.Advance(CodeInterpreter::kKeepalive);
  Poll();
  EXPECT_THAT(out.events, ElementsAre(R"({"type":"keepalive"})"));
  Kernel()->Emit(Lines({kTwo, CodeInterpreter::kEndOfExecution}));
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_TRUE(done.get().ok());
  EXPECT_EQ(out.events.back(), kTwo);
}

TEST_F(CodeInterpreterTest, AReaderThatLeftInterruptsTheRunAndTheContextLivesOn) {
  Answer([](FakeInteractive&, const std::string&) {},
         [](FakeInteractive& k, int) {
           k.Emit(Lines({R"({"type": "error", "name": "KeyboardInterrupt", "value": "", "traceback": ""})",
                         CodeInterpreter::kEndOfExecution}));
         });
  RecordedStream out;
  out.gone = true;
  auto done = Spawn(code_.Execute(sandbox_, Code("while True: pass"), out));
  Poll();
  clock_.Advance(CodeInterpreter::kKeepalive);  // the keepalive finds the reader gone
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_EQ(done.get().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(Kernel()->signals(), ElementsAre(2));  // SIGINT
  EXPECT_FALSE(Kernel()->stopped());
  EXPECT_EQ(code_.kernels(), 1u);
  // The context takes the next run, and its output is its own (the interrupted run's was drained).
  RecordedStream next;
  auto again = Spawn(code_.Execute(sandbox_, Code("1 + 1"), next));
  Poll();
  EXPECT_THAT(Kernel()->writes(), SizeIs(2));
  Kernel()->Emit(Lines({kTwo, CodeInterpreter::kEndOfExecution}));
  Poll();
  ASSERT_TRUE(Done(again));
  EXPECT_THAT(next.events, ElementsAre(kTwo));
  EXPECT_THAT(host_->interactive(), SizeIs(1));
}

TEST_F(CodeInterpreterTest, CodeThatIgnoresTheInterruptLosesItsKernel) {
  Answer([](FakeInteractive&, const std::string&) {}, [](FakeInteractive&, int) {});
  RecordedStream out;
  out.gone = true;
  auto done = Spawn(code_.Execute(sandbox_, Code("signal.signal(SIGINT, SIG_IGN); while True: pass"), out));
  Poll();
  clock_.Advance(CodeInterpreter::kKeepalive);
  Poll();
  EXPECT_FALSE(Done(done));
  clock_.Advance(CodeInterpreter::kInterruptGrace);
  Poll();
  ASSERT_TRUE(Done(done));
  EXPECT_EQ(done.get().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(Kernel()->signals(), ElementsAre(2, 15));
  EXPECT_TRUE(EndedAlone(*Kernel()));
  EXPECT_EQ(code_.kernels(), 0u);
}

TEST_F(CodeInterpreterTest, AKernelThatDiesEndsTheRunWithAnErrorAndIsForgotten) {
  Answer([](FakeInteractive& k, const std::string&) {
    k.Emit(Lines({kHello}));
    k.Exit(137);
  });
  RecordedStream out;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("os._exit(137)"), out)).ok());
  ASSERT_THAT(out.events, SizeIs(2));
  EXPECT_EQ(out.events[0], kHello);
  EXPECT_THAT(out.events[1], HasSubstr(R"("name":"KernelDied")"));
  EXPECT_EQ(code_.kernels(), 0u);
  // The next run starts a new kernel.
  Answer([](FakeInteractive& k, const std::string&) { k.Emit(Lines({kTwo, CodeInterpreter::kEndOfExecution})); });
  RecordedStream next;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("1 + 1"), next)).ok());
  EXPECT_THAT(next.events, ElementsAre(kTwo));
  EXPECT_THAT(host_->interactive(), SizeIs(2));
}

TEST_F(CodeInterpreterTest, EndedKernelsAreSweptAndTheDefaultContextStartsAgain) {
  RecordedStream out;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("1"), out)).ok());
  envd::CreateContextRequest create;
  auto made = Run(code_.CreateContext(sandbox_, create));
  ASSERT_TRUE(made.ok());
  Kernel(0)->Exit(0);  // the sandbox expired, say: both kernels end between runs
  Kernel(1)->Exit(0);
  Poll();
  // A made context says it lost its state; the default one starts again, and the dead are forgotten.
  EXPECT_EQ(Run(code_.Execute(sandbox_, Code("1", made->id()), out)).code(), absl::StatusCode::kFailedPrecondition);
  RecordedStream again;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("1"), again)).ok());
  EXPECT_THAT(again.events, ElementsAre(kHello, kTwo));
  EXPECT_THAT(host_->interactive(), SizeIs(3));
  EXPECT_EQ(code_.kernels(), 1u);
}

TEST_F(CodeInterpreterTest, ARestartDuringARunLeavesTheNewKernelAlone) {
  Answer([](FakeInteractive&, const std::string&) {});  // the run goes on until its kernel is ended
  envd::CreateContextRequest create;
  auto ctx = Run(code_.CreateContext(sandbox_, create));
  ASSERT_TRUE(ctx.ok());
  RecordedStream out;
  auto running = Spawn(code_.Execute(sandbox_, Code("while True: pass", ctx->id()), out));
  Poll();
  ASSERT_TRUE(Run(code_.RestartContext(sandbox_, ctx->id())).ok());
  ASSERT_THAT(host_->interactive(), SizeIs(2));
  EXPECT_TRUE(EndedAlone(*Kernel(0)));
  Kernel(0)->KillWith(15);  // SIGTERM ends the old kernel: its run reports it, and forgets only that kernel
  Poll();
  ASSERT_TRUE(Done(running));
  EXPECT_THAT(out.events.back(), HasSubstr("KernelDied"));
  EXPECT_TRUE(Kernel(1)->signals().empty());
  ASSERT_THAT(code_.ListContexts(sandbox_), SizeIs(1));
  EXPECT_EQ(code_.kernels(), 1u);
}

TEST_F(CodeInterpreterTest, RunsOnOneContextTakeTurns) {
  Answer([](FakeInteractive&, const std::string&) {});  // each run ends when the test says
  RecordedStream first, second;
  auto a = Spawn(code_.Execute(sandbox_, Code("a"), first));
  Poll();
  auto b = Spawn(code_.Execute(sandbox_, Code("b"), second));
  Poll();
  ASSERT_THAT(host_->interactive(), SizeIs(1));
  EXPECT_THAT(Kernel()->writes(), SizeIs(1));  // b waits for a's end
  Kernel()->Emit(Lines({kHello, CodeInterpreter::kEndOfExecution}));
  Poll();
  ASSERT_TRUE(Done(a));
  EXPECT_THAT(first.events, ElementsAre(kHello));
  EXPECT_THAT(Kernel()->writes(), SizeIs(2));
  Kernel()->Emit(Lines({kTwo, CodeInterpreter::kEndOfExecution}));
  Poll();
  ASSERT_TRUE(Done(b));
  EXPECT_THAT(second.events, ElementsAre(kTwo));
}

TEST_F(CodeInterpreterTest, ContextsAreMadeListedRestartedAndRemoved) {
  envd::CreateContextRequest create;
  create.set_cwd("work");
  auto ctx = Run(code_.CreateContext(sandbox_, create));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_THAT(ctx->id(), ::testing::StartsWith("ctx-"));
  EXPECT_EQ(ctx->cwd(), "/home/user/work");
  EXPECT_EQ(ctx->language(), "python");
  EXPECT_EQ(Kernel()->start().command().cwd(), "/home/user/work");
  ASSERT_THAT(code_.ListContexts(sandbox_), SizeIs(1));

  RecordedStream out;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("y = 5", ctx->id()), out)).ok());
  EXPECT_THAT(Kernel(0)->writes(), SizeIs(1));  // its own kernel, not the default one
  ASSERT_TRUE(Run(code_.RestartContext(sandbox_, ctx->id())).ok());
  EXPECT_TRUE(EndedAlone(*Kernel(0)));
  ASSERT_THAT(host_->interactive(), SizeIs(2));
  EXPECT_EQ(Kernel(1)->start().command().cwd(), "/home/user/work");
  ASSERT_THAT(code_.ListContexts(sandbox_), SizeIs(1));
  EXPECT_EQ(code_.ListContexts(sandbox_)[0].id(), ctx->id());

  EXPECT_TRUE(code_.RemoveContext(sandbox_, ctx->id()).ok());
  EXPECT_TRUE(EndedAlone(*Kernel(1)));
  EXPECT_THAT(code_.ListContexts(sandbox_), IsEmpty());
  EXPECT_EQ(code_.RemoveContext(sandbox_, ctx->id()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Run(code_.RestartContext(sandbox_, ctx->id())).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Run(code_.Execute(sandbox_, Code("y", ctx->id()), out)).code(), absl::StatusCode::kNotFound);
}

TEST_F(CodeInterpreterTest, OnlyPythonIsServedAndAContextOrALanguageNotBoth) {
  envd::CreateContextRequest create;
  create.set_language("r");
  EXPECT_EQ(Run(code_.CreateContext(sandbox_, create)).status().code(), absl::StatusCode::kInvalidArgument);
  RecordedStream out;
  envd::ExecuteRequest js = Code("1");
  js.set_language("js");
  EXPECT_EQ(Run(code_.Execute(sandbox_, js, out)).code(), absl::StatusCode::kInvalidArgument);
  envd::ExecuteRequest both = Code("1", "ctx-1");
  both.set_language("python");
  EXPECT_EQ(Run(code_.Execute(sandbox_, both, out)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(host_->interactive(), IsEmpty());
}

TEST_F(CodeInterpreterTest, AKilledSandboxsKernelsAreStoppedAndForgotten) {
  RecordedStream out;
  ASSERT_TRUE(Run(code_.Execute(sandbox_, Code("1"), out)).ok());
  envd::CreateContextRequest create;
  ASSERT_TRUE(Run(code_.CreateContext(sandbox_, create)).ok());
  EXPECT_EQ(code_.kernels(), 2u);
  code_.Forget(sandbox_.lease.lease_id());
  EXPECT_EQ(code_.kernels(), 0u);
  EXPECT_TRUE(Kernel(0)->stopped() && Kernel(1)->stopped());
  // A host that refuses the kernel is the run's error.
  host_->FailInteractive(absl::UnavailableError("host gone"));
  EXPECT_EQ(Run(code_.Execute(sandbox_, Code("1"), out)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(code_.kernels(), 0u);
}

}  // namespace
}  // namespace corral::sandbox_api
