// `trainer train`: the training job.
#include "app/options.h"
#include "app/train_loop.h"

namespace trainer::app {

int cmd_train(const Args& args) {
  po::options_description desc("train options");
  po::positional_options_description pos;
  add_config_options(desc, pos);
  desc.add_options()("force",
                     "start afresh even where the run directory holds an earlier run (its "
                     "checkpoints and metrics are deleted)");
  po::variables_map vm;
  if (!parse_options("train", args, desc, vm, &pos)) return 0;
  return run_training(config_from(vm), {.force = vm.count("force") > 0});
}

}  // namespace trainer::app
