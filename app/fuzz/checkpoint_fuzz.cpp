// libFuzzer target for the checkpoint reader: the input is a manifest, a trainer state and a
// model.safetensors, separated by the first two NUL bytes. Each must be accepted (and the
// weights loaded into a small model) or rejected with trainer::Error, never crash, hang or
// read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/checkpoint.h"
#include "nn/model_io.h"
#include "nn/param_layout.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainer;
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t a = all.find('\0'), b = a == std::string::npos ? a : all.find('\0', a + 1);
  const std::string manifest = all.substr(0, a);
  const std::string state = a == std::string::npos ? "" : all.substr(a + 1, b - a - 1);
  try {
    app::parse_checkpoint_manifest(manifest, "manifest.json");
  } catch (const Error&) {
  }
  try {
    app::parse_trainer_state(state, "trainer_state.json");
  } catch (const Error&) {
  }
  if (b == std::string::npos) return 0;
  try {
    static const nn::ParamLayout layout(nn::ModelConfig{
        .vocab_size = 5, .max_seq_len = 4, .n_layer = 1, .n_head = 1, .n_embd = 2});
    std::vector<float> params(size_t(layout.total()));
    const SafetensorsFile file(data + b + 1, size - b - 1, "model.safetensors");
    nn::load_params(file, layout, params.data());
  } catch (const Error&) {
  }
  return 0;
}
