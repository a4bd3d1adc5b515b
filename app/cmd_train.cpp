// `trainer train`: the training job.
#include "app/options.h"
#include "app/train_loop.h"

namespace trainer::app {

int cmd_train(const Args& args) {
  po::options_description desc("train options");
  add_config_options(desc);
  po::variables_map vm;
  if (!parse_options("train", args, desc, vm)) return 0;
  return run_training(config_from(vm));
}

}  // namespace trainer::app
