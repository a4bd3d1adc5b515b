// Shared Boost.Program_options plumbing for the subcommands: parse, --help, and conversion of
// parse failures into UsageErrors.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "app/commands.h"
#include "app/config.h"

namespace trainer::app {

namespace po = boost::program_options;

// Parses args against `desc` (positional ones too, when given). Returns false after printing
// help when --help was asked for.
bool parse_options(const std::string& command, const Args& args, po::options_description& desc,
                   po::variables_map& vm, const po::positional_options_description* pos = nullptr);

// Adds --config and --set to `desc`.
void add_config_options(po::options_description& desc);
// The Config from --config and --set.
Config config_from(const po::variables_map& vm);

}  // namespace trainer::app
