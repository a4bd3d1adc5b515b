// libFuzzer target for the config parser: any text, as a YAML file and as --set overrides,
// must either resolve into a run configuration or be rejected with trainer::Error (a
// UsageError naming the key), never crash or escape as another exception.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "app/config.h"
#include "app/run_setup.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    trainer::app::Config c;
    c.merge_yaml(text, "fuzz.yaml");
    trainer::app::resolve_run(c);
    c.to_yaml();
  } catch (const trainer::Error&) {
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    try {
      trainer::app::Config c;
      c.apply_override(line);
      trainer::app::resolve_run(c);
    } catch (const trainer::Error&) {
    }
  }
  return 0;
}
