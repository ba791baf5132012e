// tools/cli_compare.cpp: `maxtext compare` (cmd_compare.hpp) with the configs the other commands use.
#include "cli_args.hpp"
#include "cmd_compare.hpp"

namespace maxtext::cli {

int cmd_compare(const Args& a) { return maxtext_cli::cmd_compare(a, make_config); }

}  // namespace maxtext::cli
