// One input through every parser of the sandbox API's request path: the request target and the route table,
// a multipart/form-data upload (its boundary from the input's first line when that is a content type), the
// Connect envelopes of a streaming request, and the JSON of every envd request message (and its answer written
// back), and an E2B template build's body planned into setup commands. Shared by the libFuzzer target
// (request_fuzzer.cc, clang) and the replay test that runs in CI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "libs/http/connect_codec.h"
#include "libs/http/url.h"
#include "services/sandbox_api/e2b/multipart.h"
#include "services/sandbox_api/e2b/template_steps.h"
#include "services/sandbox_api/routes.h"

namespace corral::sandbox_api {

// One envd request message from `json`; true when it parsed (it is then written back).
template <typename M>
bool ParseEnvdMessage(const std::string& json) {
  M message;
  if (!FromEnvdJson(json, &message).ok()) return false;
  (void)ToEnvdJson(message);
  return true;
}

// Returns 2 when the input read as an envd request message, 1 when as a routed target, a multipart form or
// Connect envelopes, else 0.
inline int ParseEverything(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  int depth = 0;
  // As a request target, routed for both kinds of request.
  if (auto target = http::ParseTarget(input); target.ok()) {
    for (Door door : {Door::kSandboxFusion, Door::kEnvd, Door::kCodeInterpreter}) {
      if (FindRoute(door, target->path) != nullptr) depth = 1;
    }
  }
  // As an upload: a content type on the first line, the body after it.
  const size_t eol = input.find('\n');
  const std::string type = eol == std::string::npos ? input : input.substr(0, eol);
  const std::string body = eol == std::string::npos ? "" : input.substr(eol + 1);
  auto boundary = MultipartBoundary(type);
  if (ParseMultipart(body, boundary.ok() ? *boundary : "b").ok()) depth = 1;
  if (ParseMultipart(input, "b").ok()) depth = 1;
  // As a streaming request's envelopes, and its one message as JSON.
  if (http::connect::ReadEnvelopes(input).ok()) depth = 1;
  const auto message = http::connect::OnlyMessage(input);
  const std::string json = message.ok() ? *message : input;
  // As every envd request.
  const bool parsed[] = {
      ParseEnvdMessage<envd::StartRequest>(json),      ParseEnvdMessage<envd::ConnectRequest>(json),
      ParseEnvdMessage<envd::ListRequest>(json),       ParseEnvdMessage<envd::SendInputRequest>(json),
      ParseEnvdMessage<envd::CloseStdinRequest>(json), ParseEnvdMessage<envd::SendSignalRequest>(json),
      ParseEnvdMessage<envd::UpdateRequest>(json),     ParseEnvdMessage<envd::StatRequest>(json),
      ParseEnvdMessage<envd::ListDirRequest>(json),    ParseEnvdMessage<envd::MakeDirRequest>(json),
      ParseEnvdMessage<envd::MoveRequest>(json),       ParseEnvdMessage<envd::RemoveRequest>(json),
      ParseEnvdMessage<envd::WatchDirRequest>(json),
  };
  for (bool p : parsed) depth = p ? 2 : depth;
  // As an E2B template build (every COPY's upload present: the input itself), on an image and on a plain base.
  if (auto build = E2bBody(json); build.ok()) {
    std::map<std::string, std::string> files;
    if (auto hashes = CopyHashes(*build); hashes.ok()) {
      for (const std::string& h : *hashes) files[h] = input;
    }
    v1::TemplateBuild image, plain;
    image.mutable_environment()->set_image("img");
    if (PlanTemplate(*build, &image, files).ok() | PlanTemplate(*build, &plain, files).ok()) depth = std::max(depth, 1);
  }
  return depth;
}

}  // namespace corral::sandbox_api
