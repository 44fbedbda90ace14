// libFuzzer target: reading a GGUF file (issue #29). Any bytes are either read -- and then every tensor of a
// type mocbench reads dequantizes, and every metadata value can be asked for as a number -- or refused with a
// GgufError carrying a message. Anything else (another exception, a crash, a hang, a leak, an ASan or UBSan
// report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/gguf.h"

using namespace moc::gguf;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const File f = File::parse(std::string(reinterpret_cast<const char*>(data), size), "input");
    for (const auto& [key, v] : f.metadata()) {
      try {
        (void)v.as_number(key);
      } catch (const GgufError&) {
      }
    }
    for (const auto& t : f.tensors()) {
      try {
        const auto values = f.dequantize(t);
        if (values.size() != t.elements) {
          std::fprintf(stderr, "fuzz_gguf: %s: %zu values for %llu elements\n", t.name.c_str(), values.size(),
                       static_cast<unsigned long long>(t.elements));
          std::abort();
        }
      } catch (const GgufError&) {
      }
    }
  } catch (const GgufError& e) {
    if (std::string(e.what()).empty()) std::abort();  // a refusal says what is wrong
  }
  return 0;
}
