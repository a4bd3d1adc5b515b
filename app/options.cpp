#include "app/options.h"

#include <fmt/ranges.h>

#include <iostream>

#include "runtime/error.h"

namespace trainer::app {

bool parse_options(const std::string& command, const Args& args, po::options_description& desc,
                   po::variables_map& vm, const po::positional_options_description* pos) {
  desc.add_options()("help,h", "show this help");
  const po::positional_options_description none;  // every positional argument is an error
  try {
    po::command_line_parser parser(args);
    parser.options(desc).positional(pos ? *pos : none);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: trainer " << command << " [options]\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::too_many_positional_options_error&) {
    throw UsageError(
        fmt::format("trainer {}: unexpected argument(s) in '{}' (see trainer {} --help)", command,
                    fmt::join(args, " "), command));
  } catch (const po::error& e) {
    throw UsageError(fmt::format("trainer {}: {}", command, e.what()));
  }
  return true;
}

void add_config_options(po::options_description& desc, po::positional_options_description& pos) {
  desc.add_options()("config,c", po::value<std::string>()->default_value(""),
                     "YAML config file (also the first positional argument)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override a key: --set optimizer.lr=3e-4 (repeatable)");
  pos.add("config", 1);
}

Config config_from(const po::variables_map& vm) {
  std::vector<std::string> sets;
  if (vm.count("set")) sets = vm["set"].as<std::vector<std::string>>();
  return Config::load(vm["config"].as<std::string>(), sets);
}

}  // namespace trainer::app
