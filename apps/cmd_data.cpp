// `mmtrain data synth`: write synthetic datasets (the shapes VQA set, the moving-shapes videos).
#include <iostream>
#include <optional>

#include "commands.h"
#include "mm/core/error.h"
#include "mm/data/synth_shapes.h"
#include "mm/data/synth_video.h"

namespace mm::cli {
namespace {

struct SynthOptions {
  std::string kind;
  std::string out;
  // Shared by both kinds; unset keeps the kind's own default.
  std::optional<int64_t> train, test;
  std::optional<uint64_t> seed;
  ShapesOptions shapes;
  VideoSynthOptions video;
  std::vector<std::string> shapes_only, video_only;  // the kind-specific options given
};

void run_synth(SynthOptions o) {
  MM_CHECK(o.kind == "shapes" || o.kind == "video", "data synth: --kind '", o.kind,
           "' is not supported (supported: shapes, video)");
  const auto& foreign = o.kind == "shapes" ? o.video_only : o.shapes_only;
  MM_CHECK(foreign.empty(), "data synth: ", foreign.front(),
           " does not apply to --kind ", o.kind);
  if (o.kind == "shapes") {
    if (o.train) o.shapes.train = *o.train;
    if (o.test) o.shapes.test = *o.test;
    if (o.seed) o.shapes.seed = *o.seed;
    write_shapes_dataset(o.out, o.shapes);
    std::cout << "wrote the shapes dataset to " << o.out << ": " << o.shapes.train << " train and "
              << o.shapes.test << " test records (" << o.shapes.image_size << "x" << o.shapes.image_size
              << " images, seed " << o.shapes.seed << ")" << std::endl;
    return;
  }
  if (o.train) o.video.train = *o.train;
  if (o.test) o.video.test = *o.test;
  if (o.seed) o.video.seed = *o.seed;
  write_video_dataset(o.out, o.video);
  std::cout << "wrote the video dataset to " << o.out << ": " << o.video.train << " train and "
            << o.video.test << " test clips (" << o.video.frames << " frames of " << o.video.width << "x"
            << o.video.height << " at " << o.video.fps << " fps, seed " << o.video.seed << ")" << std::endl;
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Dataset tools: synthetic datasets");
  data->require_subcommand(1);
  auto options = std::make_shared<SynthOptions>();
  CLI::App* synth = data->add_subcommand(
      "synth",
      "Write a synthetic dataset. shapes: images of one coloured shape in one quadrant with "
      "questions about colour, shape, position and a caption (train.jsonl, test.jsonl, images/). "
      "video: mp4 clips of one coloured shape moving or growing/shrinking, with captions "
      "(train.jsonl, test.jsonl of {\"path\", \"caption\"}, videos/)");
  synth->add_option("--kind", options->kind, "Which dataset: shapes | video")
      ->required()
      ->check(CLI::IsMember({"shapes", "video"}));
  synth->add_option("--out", options->out, "Output directory (created; earlier files there are overwritten)")
      ->required();
  synth->add_option("--train", options->train, "Training records (default: shapes 2000, video 200)")
      ->check(CLI::NonNegativeNumber);
  synth->add_option("--test", options->test, "Test records (default: shapes 200, video 20)")
      ->check(CLI::NonNegativeNumber);
  synth->add_option("--seed", options->seed, "Seed: the same seed gives the same files (default 0)");
  auto kind_option = [&](const char* name, auto& value, const char* help, std::vector<std::string>* given) {
    synth->add_option_function<std::remove_reference_t<decltype(value)>>(
              name, [&value, given, name](const auto& v) { value = v, given->push_back(name); }, help)
        ->default_str(str_cat(value));
  };
  kind_option("--image-size", options->shapes.image_size, "shapes: image side in pixels (28 to 2048)",
              &options->shapes_only);
  kind_option("--frames", options->video.frames, "video: frames per clip (Wan's VAE takes 1 + 4k)",
              &options->video_only);
  kind_option("--width", options->video.width, "video: frame width, a multiple of 16", &options->video_only);
  kind_option("--height", options->video.height, "video: frame height, a multiple of 16", &options->video_only);
  kind_option("--fps", options->video.fps, "video: frames per second", &options->video_only);
  synth->callback([options] { run_synth(*options); });
}

}  // namespace mm::cli
