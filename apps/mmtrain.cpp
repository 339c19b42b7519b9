// mmtrain: the one binary. Subcommands share option names; errors print one line and exit 1.
#include <CLI/CLI.hpp>

#include <iostream>

#include "mm/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"mmtrain: multimodal training, inference and evaluation on libtorch"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mm::Error& e) {
    std::cerr << "mmtrain: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
