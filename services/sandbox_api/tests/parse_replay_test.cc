// The sandbox API's fuzz target (fuzz/parse_everything.h) over seeds and 20,000 deterministic mutations of them,
// plus inputs built to hurt (deep nesting, a huge envelope length, a boundary that never ends, NULs, invalid
// UTF-8): every one must be survived, and the mutations must still reach the parsers.
#include <vector>

#include "gtest/gtest.h"
#include "services/sandbox_api/fuzz/parse_everything.h"
#include "tests/support/mutations.h"

namespace corral::sandbox_api {
namespace {

const std::vector<std::string> kSeeds = {
    "/files?path=%2Fhome%2Fuser%2Fa.txt&username=user",
    "multipart/form-data; boundary=----formdata-undici-0123\n"
    "------formdata-undici-0123\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
    "Content-Type: application/octet-stream\r\n\r\nhello\r\n------formdata-undici-0123--\r\n",
    http::connect::Envelope(
        R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":true,"tag":"t"})"),
    R"({"process":{"pid":1000},"input":{"stdin":"aGVsbG8K"}})",
    R"({"process":{"tag":"srv"},"signal":"SIGNAL_SIGTERM"})",
    R"({"path":"/home/user","depth":3,"recursive":true,"includeEntry":true})",
    R"({"source":"a","destination":"b"})",
    R"({"fromImage":"python:3.12","steps":[{"type":"ENV","args":["P","/x:$PATH"]},{"type":"RUN","args":["make","root"]},)"
    R"({"type":"COPY","args":["src","/app/","agent","0755"],"filesHash":"ab12"}],"startCmd":"s","readyCmd":"r"})",
};

TEST(SandboxApiParseReplayTest, SeedsAndTwentyThousandMutationsAreSurvived) {
  testing::Mutator mutator(20261129);
  const int per_seed = 20000 / static_cast<int>(kSeeds.size());
  int runs = 0, messages = 0, framed = 0;
  for (const std::string& s : kSeeds) {
    EXPECT_GE(ParseEverything(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 1) << s;
    for (int i = 0; i < per_seed; ++i) {
      const std::string m = mutator.Mutate(s);
      const int depth = ParseEverything(reinterpret_cast<const uint8_t*>(m.data()), m.size());
      messages += depth == 2 ? 1 : 0;
      framed += depth >= 1 ? 1 : 0;
      ++runs;
    }
  }
  const std::vector<std::string> hostile_inputs = {
      std::string(100000, '{'),
      std::string(50000, '[') + std::string(50000, ']'),
      std::string("\x00\xff\xff\xff\xff{}", 7),  // an envelope claiming 4 GiB
      "multipart/form-data; boundary=x\n--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n" +
          std::string(70000, 'a'),
      std::string("{\"path\":\"\0\"}", 12),
      std::string(R"({"process":{"cmd":"\xff\xfe"}})"),
      R"({"process":{"pid":99999999999999999999}})",
      "/files?" + std::string(50000, '&')};
  for (const std::string& hostile : hostile_inputs) {
    ParseEverything(reinterpret_cast<const uint8_t*>(hostile.data()), hostile.size());
    ++runs;
  }
  EXPECT_EQ(runs, per_seed * static_cast<int>(kSeeds.size()) + static_cast<int>(hostile_inputs.size()));
  // The mutations are not all refused at the door: many still parse as messages, forms or envelopes.
  EXPECT_GT(messages, 1000) << messages;
  EXPECT_GT(framed, 2000) << framed;
}

}  // namespace
}  // namespace corral::sandbox_api
