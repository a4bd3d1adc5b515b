// trainer: one executable, many subcommands. `trainer --config x.yaml` means `trainer train
// --config x.yaml`. Every failure ends here as one line on stderr and a non-zero exit code:
// 1 for runtime failures, 2 for usage and config errors.
#if __has_include(<malloc.h>)
#include <malloc.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "app/commands.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace {

struct Command {
  int (*run)(const trainer::app::Args&);
  const char* summary;
  // It writes one output (a folder, a corpus, a tokenizer) and has no use for ranks: under a
  // launcher's several processes they would race for it, so it is refused there.
  bool one_process = false;
};

const std::map<std::string, Command>& commands() {
  using namespace trainer::app;
  static const std::map<std::string, Command> table = {
      {"train", {cmd_train, "train a model (the default command)"}},
      {"eval",
       {cmd_eval,
        "loss, perplexity and bits per byte on held-out data, or task accuracy, "
        "of a checkpoint or Hugging Face folder"}},
      {"sample", {cmd_sample, "generate text from a checkpoint or Hugging Face folder"}},
      {"tokenizer",
       {cmd_tokenizer, "train a SentencePiece tokenizer; encode or decode with any", true}},
      {"prepare", {cmd_prepare, "tokenize a corpus into shards", true}},
      {"config", {cmd_config, "print the resolved config or the config reference"}},
      {"inspect",
       {cmd_inspect, "print a checkpoint's (or Hugging Face folder's) model and tensors"}},
      {"export", {cmd_export, "export a checkpoint as a Hugging Face model folder", true}},
      {"plan", {cmd_plan, "print the memory a config needs per rank"}},
      {"bench", {cmd_bench, "measure step time, throughput and MFU"}},
  };
  return table;
}

void print_usage() {
  std::printf(
      "usage: trainer <command> [options]   (trainer <command> --help for details)\n"
      "       trainer --config <file.yaml> [--set key=value ...]   (= trainer train)\n\n"
      "commands:\n");
  for (const auto& [name, cmd] : commands()) std::printf("  %-10s %s\n", name.c_str(), cmd.summary);
}

}  // namespace

int main(int argc, char** argv) {
  // Large allocations (buffers, staging) are mapped and go back to the system when freed. By
  // default glibc raises its mapping threshold to the size of each mapped block freed, after
  // which blocks up to 32 MiB come from the heap and stay resident once freed: the start-up
  // GEMM measurement's 64 MiB then stayed in the run's memory beyond its plan.
#ifdef M_MMAP_THRESHOLD  // glibc's
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  std::string name = "train";
  if (!args[0].starts_with("-")) {
    name = args[0];
    args.erase(args.begin());
  }
  auto it = commands().find(name);
  if (it == commands().end()) {
    const bool yaml = name.ends_with(".yaml") || name.ends_with(".yml");
    std::fprintf(stderr, "error: unknown command '%s' (%s)\n", name.c_str(),
                 yaml ? ("to train with this config: trainer train " + name).c_str()
                      : "trainer --help lists them");
    return 2;
  }
  int code = 0;
  try {
    // (A Slurm batch script's own environment names the job's tasks but is one process: only
    // a job step, which srun starts, sets SLURM_STEP_NUM_TASKS.)
    const auto several = [](const trainer::dist::LaunchInfo& l) {
      return l.distributed() && (l.launcher != "srun" || std::getenv("SLURM_STEP_NUM_TASKS"));
    };
    if (it->second.one_process)
      if (const trainer::dist::LaunchInfo l = trainer::dist::discover_launch(); several(l))
        throw trainer::UsageError(fmt::format(
            "trainer {} writes its output from one process, but this is rank {} of {} ({}): "
            "run it without a launcher",
            name, l.rank, l.world_size, l.launcher));
    code = it->second.run(args);
    // Output that could not be written (a full disk, a closed pipe) is a failure too.
    std::cout.flush();
    if (std::fflush(stdout) != 0 || std::cout.fail()) {
      std::fprintf(stderr, "error: cannot write the output: %s\n", std::strerror(errno));
      code = 1;
    }
  } catch (const trainer::UsageError& e) {
    trainer::log::error("{}", e.what());  // the same line, and in the run's log when it has one
    code = 2;
  } catch (const trainer::Error& e) {
    trainer::log::error("{}", e.what());
    code = 1;
  } catch (const std::exception& e) {
    trainer::log::error("{}", e.what());
    code = 1;
  }
  trainer::dist::set_abort_exit_code(code);  // the job's code if MPI must abort it at exit
  return code;
}
