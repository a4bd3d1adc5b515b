// `trainer train`: the training job.
#include "app/options.h"
#include "app/run_training.h"

namespace trainer::app {

int cmd_train(const Args& args) {
  po::options_description desc("train options");
  po::positional_options_description pos;
  add_config_options(desc, pos);
  desc.add_options()("force",
                     "let this start replace what the run directory holds beyond its starting "
                     "point (an earlier run's checkpoints and metrics), which is otherwise "
                     "refused; deleted only after every other check has passed. Also applies "
                     "checkpoint.keep_last and keep_every to checkpoints saved under another "
                     "retention policy, which are otherwise kept");
  po::variables_map vm;
  if (!parse_options("train", args, desc, vm, &pos)) return 0;
  return run_training(config_from(vm), {.force = vm.count("force") > 0});
}

}  // namespace trainer::app
