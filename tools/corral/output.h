// What the CLI's subcommands print: errors in one shape ("corral <what>: <status>", exit code 1) and protos as
// JSON with the proto's field names.
#pragma once

#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"

namespace corral::cli {

// `s`, with what to do about it when a service refused the call's credentials.
inline absl::Status WithCredentialHint(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnauthenticated) return s;
  return absl::Status(s.code(), absl::StrCat(s.message(),
                                             "; give the cluster's credentials: --secret-file FILE (the secret the "
                                             "services were started with), --cluster-dir DIR (a `corral up` "
                                             "cluster, whose secret is DIR/secret; default .corral) or --token TOKEN"));
}

inline int Fail(const std::string& what, const absl::Status& s) {
  std::cerr << "corral " << what << ": " << WithCredentialHint(s) << "\n";
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
