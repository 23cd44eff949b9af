// alloy: the command. All of it is apps/cli/alloy_main.h's run_alloy, which a program of one's own
// calls too, to be this command with its own models registered.
#include "apps/cli/alloy_main.h"

int main(int argc, char** argv) {
  return alloy::app::run_alloy(argc, argv);
}
