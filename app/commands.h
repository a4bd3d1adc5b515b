// The subcommands of `trainer`. Each parses its own options with Boost.Program_options
// (args excludes the program and subcommand names) and returns the process exit code:
// 0 success, 1 runtime failure, 2 usage or config error (thrown as UsageError).
#pragma once

#include <string>
#include <vector>

namespace trainer::app {

using Args = std::vector<std::string>;

int cmd_train(const Args& args);
int cmd_eval(const Args& args);
int cmd_sample(const Args& args);
int cmd_tokenizer(const Args& args);
int cmd_prepare(const Args& args);
int cmd_config(const Args& args);
int cmd_inspect(const Args& args);
int cmd_export(const Args& args);
int cmd_plan(const Args& args);
int cmd_bench(const Args& args);

}  // namespace trainer::app
