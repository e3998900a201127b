// An E2B template build (the body of POST /v2/templates/{id}/builds/{buildID}) as a Corral environment: the
// base image, then each step as a setup command of the template, in order, so that the host that builds it keeps
// what they changed as a layer over the image (cached by content: the same steps on the same base build once).
//   RUN      `sh -c` (bash where the image has it), as the step's user or the USER in force, in the WORKDIR in
//            force, with the ENV in force;
//   COPY     the uploaded archive is placed in the sandbox and unpacked there by `tar`, then copied to its
//            destination (Docker's rules: a directory's contents into it, a file to the path or into a
//            directory ending in '/'), owned by the step's user and with its mode;
//   ENV      variables for the later steps and every sandbox of the template ($VAR and ${VAR} expanded from the
//            ones set before, PATH from the usual default), kept as the build's annotation: a sandbox gets them as
//            its own variables (LeaseSandboxRequest.env), so that no step sees one set after it;
//   WORKDIR  made, and the directory of the later steps and of startCmd;
//   USER     the user of the later steps and of startCmd.
// startCmd and readyCmd are not run by the build: every sandbox made from the template starts startCmd and waits
// for readyCmd (see E2bTemplates). Pure functions; no I/O.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/json/object.hpp"
#include "corral/v1/scheduler.pb.h"

namespace corral::sandbox_api {

// Annotations of a build (TemplateBuild.annotations) this API reads back.
inline constexpr char kStartCmdAnnotation[] = "e2b.start_cmd";
inline constexpr char kReadyCmdAnnotation[] = "e2b.ready_cmd";
inline constexpr char kUserAnnotation[] = "e2b.user";        // the USER in force at the end
inline constexpr char kWorkdirAnnotation[] = "e2b.workdir";  // the WORKDIR in force at the end
inline constexpr char kStepsAnnotation[] = "e2b.steps";      // each setup command's step number, comma-separated
inline constexpr char kEnvAnnotation[] = "e2b.env";          // the ENV in force at the end, a JSON object
inline constexpr char kCpuAnnotation[] = "e2b.cpu_count";
inline constexpr char kMemoryAnnotation[] = "e2b.memory_mb";

struct TemplatePlan {
  v1::EnvironmentSpec environment;  // image, setup files and commands; the sandbox's defaults are the caller's
  std::map<std::string, std::string> annotations;
  std::vector<std::string> log_lines;  // one per step, as the build log starts
};

// The COPY steps' archive hashes (filesHash), in order; INVALID_ARGUMENT for a malformed body.
absl::StatusOr<std::vector<std::string>> CopyHashes(const boost::json::object& body);

// The plan of `body` over `base` (fromTemplate's ready build's environment and annotations, or null for
// fromImage). `files` holds each COPY step's archive by hash. `plain` says the base is a sandbox on the host's
// filesystem (one user: steps name none). INVALID_ARGUMENT naming the step for a malformed or unsupported one.
absl::StatusOr<TemplatePlan> PlanTemplate(const boost::json::object& body, const v1::TemplateBuild* base,
                                          const std::map<std::string, std::string>& files);

// A failed build's message as E2B shows it, and the step it names ("" when it names none): the host's
// "setup_commands[N] (...) exited ..." becomes "step 3 (RUN make) exited ...".
std::pair<std::string, std::string> DescribeFailure(const v1::TemplateBuild& build);

// The variables a sandbox of `build` gets (its kEnvAnnotation); empty for none or a malformed one.
std::map<std::string, std::string> TemplateEnv(const v1::TemplateBuild& build);

// `s` quoted for sh where it needs to be (E2B's shellQuote).
std::string ShellQuote(const std::string& s);

}  // namespace corral::sandbox_api
