// libFuzzer target for two readers of files people download: a Hugging Face config.json and a
// task file's lines. The input is the config.json, then (after the first NUL byte) the task
// file; each is written to a file of this process and read as the trainer reads it. Each must
// be accepted or rejected with trainer::Error, never crash, hang or escape as another exception.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "app/task_eval.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "nn/hf_config.h"
#include "runtime/error.h"

namespace {

namespace fs = std::filesystem;

// This process's scratch folder (one per process: libFuzzer may run several), removed at exit.
// The path is never destroyed, so that the exit hook may still read it.
const fs::path& scratch() {
  static const fs::path* const dir = [] {
    const auto* d =
        new fs::path(fs::temp_directory_path() / ("hf_task_fuzz." + std::to_string(getpid())));
    fs::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch(), ec);
    });
    return d;
  }();
  return *dir;
}

// Writes `text` to `path` (no fsync: a scratch file read back at once).
void put(const fs::path& path, std::string_view text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(text.data(), std::streamsize(text.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainer;
  static const data::Tokenizer tok(data::byte_tokenizer_json(), "byte");
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t cut = all.find('\0');
  const fs::path config = scratch() / "config.json", task = scratch() / "task.jsonl";
  put(config, std::string_view(all).substr(0, cut));
  try {
    nn::hf_model_config(config);
  } catch (const Error&) {
  }
  if (cut == std::string::npos) return 0;
  put(task, std::string_view(all).substr(cut + 1));
  try {
    app::read_task(task, tok, {64, 300, 0});
  } catch (const Error&) {
  }
  return 0;
}
