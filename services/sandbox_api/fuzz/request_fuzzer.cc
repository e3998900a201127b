// libFuzzer target for the sandbox API's request path (build with clang: cmake -DCORRAL_FUZZ=ON
// -DCMAKE_CXX_COMPILER=clang++, then build/bin/sandbox-api-request-fuzzer [corpus]). The same function runs in
// CI as a replay test.
#include "services/sandbox_api/fuzz/parse_everything.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)corral::sandbox_api::ParseEverything(data, size);
  return 0;
}
