// What the CLI's subcommands print: errors in one shape ("corral <what>: <status>", exit code 1) and protos as
// JSON with the proto's field names.
#pragma once

#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"

namespace corral::cli {

inline int Fail(const std::string& what, const absl::Status& s) {
  std::cerr << "corral " << what << ": " << s << "\n";
  return 1;
}

inline std::string ToJson(const google::protobuf::Message& m, bool pretty) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, options);
  return json;
}

}  // namespace corral::cli
