// `mmtrain data synth`: write synthetic datasets (the shapes VQA set for now).
#include <iostream>

#include "commands.h"
#include "mm/core/error.h"
#include "mm/data/synth_shapes.h"

namespace mm::cli {
namespace {

struct SynthOptions {
  std::string kind;
  std::string out;
  ShapesOptions shapes;
};

void run_synth(const SynthOptions& o) {
  MM_CHECK(o.kind == "shapes", "data synth: --kind '", o.kind,
           "' is not supported yet (supported: shapes)");
  write_shapes_dataset(o.out, o.shapes);
  std::cout << "wrote the shapes dataset to " << o.out << ": " << o.shapes.train << " train and "
            << o.shapes.test << " test records (" << o.shapes.image_size << "x" << o.shapes.image_size
            << " images, seed " << o.shapes.seed << ")" << std::endl;
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Dataset tools: synthetic datasets");
  data->require_subcommand(1);
  auto options = std::make_shared<SynthOptions>();
  CLI::App* synth = data->add_subcommand(
      "synth",
      "Write a synthetic dataset. shapes: images of one coloured shape in one quadrant with "
      "questions about colour, shape, position and a caption (train.jsonl, test.jsonl, images/)");
  synth->add_option("--kind", options->kind, "Which dataset: shapes")->required();
  synth->add_option("--out", options->out, "Output directory (created; earlier files there are overwritten)")
      ->required();
  synth->add_option("--train", options->shapes.train, "Training records")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  synth->add_option("--test", options->shapes.test, "Test records")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  synth->add_option("--image-size", options->shapes.image_size, "Image side in pixels (28 to 2048)")
      ->capture_default_str();
  synth->add_option("--seed", options->shapes.seed, "Seed: the same seed gives byte-identical files")
      ->capture_default_str();
  synth->callback([options] { run_synth(*options); });
}

}  // namespace mm::cli
