#include "libs/process/supervise.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace corral {

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // The child must not inherit a blocked signal mask from the test (gRPC threads etc.).
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  return Subprocess(pid, log_path);
}

Subprocess::Subprocess(Subprocess&& other) noexcept : pid_(other.pid_), log_path_(std::move(other.log_path_)) {
  other.pid_ = -1;
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool Subprocess::Signal(int sig) const { return pid_ > 0 && kill(pid_, sig) == 0; }

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("process already reaped");
  // A pidfd becomes readable when the process exits, so the wait is a poll with a timeout, not a loop.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd >= 0) {
    pollfd pfd{pidfd, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    close(pidfd);
    if (ready == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
  }
  int status = 0;
  if (waitpid(pid_, &status, 0) != pid_) return absl::InternalError("waitpid failed");
  pid_ = -1;
  return status;
}

std::string Subprocess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<ReadyInfo> WaitForReadyFile(const std::string& path, absl::Duration timeout, const Subprocess* process) {
  const absl::Time deadline = absl::Now() + timeout;
  static const std::regex kPattern(
      R"re(\{"service":"[^"]*","pid":(\d+),"grpc":"([^"]*)","metrics":"([^"]*)"(?:,"http":"([^"]*)")?\})re");
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    std::string line;
    std::smatch m;
    if (in && std::getline(in, line) && std::regex_match(line, m, kPattern)) {
      ReadyInfo info;
      (void)absl::SimpleAtoi(m[1].str(), &info.pid);
      info.grpc = m[2];
      info.metrics = m[3];
      info.http = m[4];
      return info;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::DeadlineExceededError(absl::StrCat("no ready file at ", path, " after ", absl::FormatDuration(timeout),
                                                  process ? "; process log:\n" + process->Log() : ""));
}

absl::StatusOr<RunningService> StartService(const std::string& binary, std::vector<std::string> args,
                                            const std::string& dir, const std::string& name) {
  const std::string ready_file = dir + "/" + name + ".ready.json";
  std::filesystem::remove(ready_file);
  args.insert(args.begin(), binary);
  args.push_back("--ready-file=" + ready_file);
  auto process = Subprocess::Start(args, dir + "/" + name + ".log");
  if (!process.ok()) return process.status();
  auto ready = WaitForReadyFile(ready_file, absl::Seconds(30), &*process);
  if (!ready.ok()) return ready.status();
  return RunningService{*std::move(process), *ready};
}

absl::Status WriteReadyFile(const std::string& path, const std::string& service, const ReadyInfo& info) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"service\":\"" << service << "\",\"pid\":" << info.pid << ",\"grpc\":\"" << info.grpc
        << "\",\"metrics\":\"" << info.metrics << "\"" << (info.http.empty() ? "" : ",\"http\":\"" + info.http + "\"")
        << "}\n";
    if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ready file '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot rename ready file to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace corral
