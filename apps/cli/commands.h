// The subcommands of `alloy`. Each takes the words after its name and returns an exit status;
// failures are exceptions, mapped to exit statuses once, in main.
#pragma once

#include <string>
#include <vector>

namespace alloy::app {

int run_train(const std::vector<std::string>& args);
int run_eval(const std::vector<std::string>& args);
int run_mem(const std::vector<std::string>& args);
int run_ckpt(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);

}  // namespace alloy::app
