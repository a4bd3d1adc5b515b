// Shared Boost.Program_options plumbing for the subcommands: parse, --help, stray arguments,
// range checks, and conversion of parse failures into UsageErrors.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "app/commands.h"
#include "app/config.h"
#include "runtime/error.h"

namespace trainer::app {

// The help of the commands that open a saved model (app/model_source.h): what it may be.
inline constexpr const char* kModelSourceHelp =
    "checkpoint directory, a run directory (its latest), a Hugging Face model folder or a PEFT "
    "adapter folder (on the base its adapter_config.json names); also positional";

namespace po = boost::program_options;

// Parses args against `desc`. Positional arguments go where `pos` says; without `pos` any
// positional argument is an error (a stray word must not be ignored). Returns false after
// printing help when --help was asked for.
bool parse_options(const std::string& command, const Args& args, po::options_description& desc,
                   po::variables_map& vm, const po::positional_options_description* pos = nullptr);

// Adds --config and --set to `desc`, and the config file as the first positional argument
// (`trainer train my.yaml` = `trainer train --config my.yaml`) to `pos`.
void add_config_options(po::options_description& desc, po::positional_options_description& pos);
// The Config from --config and --set.
Config config_from(const po::variables_map& vm);

// Throws a UsageError naming --name unless min <= vm[name] <= max.
template <typename T>
void require_range(const std::string& command, const po::variables_map& vm, const char* name, T min,
                   T max) {
  if (!vm.count(name)) return;
  const T v = vm[name].as<T>();
  if (!(v >= min && v <= max))
    throw UsageError(
        fmt::format("trainer {}: --{} must be in [{}, {}], got {}", command, name, min, max, v));
}

}  // namespace trainer::app
