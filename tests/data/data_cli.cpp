// data_cli: a stand-in for `trainer` that runs only the data subcommands (tokenizer, prepare),
// so the data layer's commands and scripts can be tested without the whole trainer binary.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "runtime/error.h"

int main(int argc, char** argv) {
  using namespace trainer;
  if (argc < 2) {
    std::fprintf(stderr, "usage: data_cli tokenizer|prepare ...\n");
    return 2;
  }
  std::string cmd = argv[1];
  app::Args args(argv + 2, argv + argc);
  try {
    if (cmd == "tokenizer") return app::cmd_tokenizer(args);
    if (cmd == "prepare") return app::cmd_prepare(args);
    throw UsageError("unknown command '" + cmd + "' (tokenizer or prepare)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
