// mmtrain: the one binary. Subcommands share option names; bad input prints one line
// ("mmtrain: error: ...") and exits 1, a usage error 2.
#include "commands.h"

int main(int argc, char** argv) { return mm::cli::run(argc, argv); }
