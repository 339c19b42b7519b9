// The synthetic "shapes" dataset: small images of one coloured shape in one quadrant, with short
// questions about it. Made for smoke-testing training end to end: a tiny vision-language model
// trained from scratch on CPU learns it in minutes, so a rising accuracy shows the whole stack
// (data, processor, model, loss, optimizer, evaluation) works.
//
// Layout written under out_dir:
//   images/train/000000.png ...   images/test/000000.png ...   (RGB, image_size x image_size)
//   train.jsonl, test.jsonl        one conversation per line, in the ShareGPT / LLaMA-Factory
//                                  "messages" form, image paths relative to out_dir:
//     {"messages": [{"role": "user", "content": "<image>What color is the shape?"},
//                   {"role": "assistant", "content": "red"}],
//      "images": ["images/train/000000.png"], "type": "color"}
//   README.txt                     what the data is and how it was made
//
// Question types cycle color, shape, position, caption over the records (so each is a quarter):
//   color    "What color is the shape?"  -> red | green | blue | yellow | purple | orange
//   shape    "What shape is this?"       -> circle | square | triangle
//   position "Where is the shape?"       -> top left | top right | bottom left | bottom right
//   caption  "Describe the image."       -> "a red circle in the top left"
// Each image: a saturated shape filling most of its quadrant and never leaving it (size and
// offset jittered a little) on a light grey background with light grey noise. Everything is drawn
// from splitmix64 streams keyed by (seed, split, index), so the same options give byte-identical
// files on every machine; no image appears twice in or across the splits.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mm {

struct ShapesOptions {
  int64_t train = 2000;      // records (and images) in train.jsonl
  int64_t test = 200;        // records in test.jsonl
  int64_t image_size = 56;   // pixels per side, at least 28
  uint64_t seed = 0;

  // Throws mm::Error naming the field (negative counts, image_size out of [28, 2048]).
  void validate() const;
};

// The vocabulary of the answers, for templates and tests.
const std::vector<std::string>& shapes_colors();     // red, green, blue, yellow, purple, orange
const std::vector<std::string>& shapes_kinds();      // circle, square, triangle
const std::vector<std::string>& shapes_positions();  // top left, top right, bottom left, bottom right

// Writes the dataset (creating out_dir; files of an earlier run there are overwritten). Throws
// mm::Error naming out_dir when it is not a directory or cannot be written.
void write_shapes_dataset(const std::filesystem::path& out_dir, const ShapesOptions& options);

}  // namespace mm
