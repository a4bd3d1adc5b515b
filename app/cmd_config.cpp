// `trainer config`: the resolved config (--print), the run directory it names (--run-dir) or
// the reference of every key (--schema).
#include <iostream>

#include "app/options.h"
#include "app/run_setup.h"

namespace trainer::app {

int cmd_config(const Args& args) {
  po::options_description desc("config options");
  po::positional_options_description pos;
  add_config_options(desc, pos);
  desc.add_options()("print", "print the resolved config as YAML (the default)")(
      "schema", "print the reference of every key as Markdown (docs/config.md)")(
      "run-dir", "print the run directory (run.dir/run.name); launch scripts read its 'stopped'")(
      "force", "ignored: accepted so that a launcher can pass train's command line unchanged");
  po::variables_map vm;
  if (!parse_options("config", args, desc, vm, &pos)) return 0;
  if (vm.count("schema")) {
    std::cout << schema_markdown();
    return 0;
  }
  const Config c = config_from(vm);
  if (vm.count("run-dir")) {
    std::cout << run_dir_of(c).string() << "\n";
    return 0;
  }
  std::cout << c.to_yaml();
  return 0;
}

}  // namespace trainer::app
