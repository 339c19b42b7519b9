#include "mm/data/synth_shapes.h"

#include <torch/torch.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "mm/core/error.h"
#include "mm/core/log.h"
#include "mm/core/safetensors.h"
#include "mm/media/image_encode.h"
#include "mm/data/synth_common.h"

namespace mm {
namespace {

using synth::SplitMix64;

// Well separated, saturated colours: a tiny ViT tells them apart from the first steps.
struct Colour {
  const char* name;
  std::array<uint8_t, 3> rgb;
};
constexpr std::array<Colour, 6> kColours{{{"red", {220, 20, 20}},
                                          {"green", {20, 170, 40}},
                                          {"blue", {25, 60, 225}},
                                          {"yellow", {240, 220, 10}},
                                          {"purple", {140, 30, 170}},
                                          {"orange", {255, 120, 0}}}};
constexpr std::array<const char*, 3> kKinds{"circle", "square", "triangle"};
constexpr std::array<const char*, 4> kPositions{"top left", "top right", "bottom left", "bottom right"};

struct Question {
  const char* type;
  const char* prompt;
};
constexpr std::array<Question, 4> kQuestions{{{"color", "What color is the shape?"},
                                              {"shape", "What shape is this?"},
                                              {"position", "Where is the shape?"},
                                              {"caption", "Describe the image."}}};

struct Sample {
  int colour = 0, kind = 0, position = 0;
  std::vector<uint8_t> pixels;  // [size, size, 3]
};

// Draws one image from its own stream, so any record can be regenerated alone.
Sample draw(uint64_t key, int64_t size) {
  SplitMix64 rng{key};
  Sample s;
  s.colour = static_cast<int>(rng.below(kColours.size()));
  s.kind = static_cast<int>(rng.below(kKinds.size()));
  s.position = static_cast<int>(rng.below(kPositions.size()));
  s.pixels.resize(static_cast<size_t>(size * size * 3));

  const int64_t background = rng.between(215, 245);
  const int64_t half = size / 2;
  // The shape spans 70-84% of its quadrant and its centre moves up to a twentieth of the quadrant
  // off centre: it never leaves its quadrant, and no two images are alike.
  const int64_t radius = half * rng.between(35, 42) / 100;
  const int64_t jitter = std::max<int64_t>(half / 20, 1);
  const int64_t cx = (s.position % 2) * half + half / 2 + rng.between(-jitter, jitter);
  const int64_t cy = (s.position / 2) * half + half / 2 + rng.between(-jitter, jitter);
  const auto& rgb = kColours[s.colour].rgb;

  auto inside = [&](int64_t x, int64_t y) {
    const int64_t dx = x - cx, dy = y - cy;
    switch (s.kind) {
      case 0: return dx * dx + dy * dy <= radius * radius;
      case 1: return std::abs(dx) <= radius * 4 / 5 && std::abs(dy) <= radius * 4 / 5;
      default:  // upward triangle, apex at cy - radius, base at cy + radius, base width 2 * radius
        return dy >= -radius && dy <= radius && 2 * std::abs(dx) <= dy + radius;
    }
  };
  for (int64_t y = 0; y < size; ++y) {
    for (int64_t x = 0; x < size; ++x) {
      uint8_t* p = &s.pixels[static_cast<size_t>((y * size + x) * 3)];
      if (inside(x, y)) {
        p[0] = rgb[0], p[1] = rgb[1], p[2] = rgb[2];
      } else {
        // Grey noise of +-10 levels: different images never collide, colours stay untouched.
        const auto v = static_cast<uint8_t>(background + rng.between(-10, 10));
        p[0] = p[1] = p[2] = v;
      }
    }
  }
  return s;
}

std::string readme(const ShapesOptions& o) {
  return str_cat(
      "Synthetic shapes dataset, written by `mmtrain data synth --kind shapes`.\n\n",
      "Options: train=", o.train, " test=", o.test, " image_size=", o.image_size, " seed=", o.seed, "\n",
      "The same options give byte-identical files.\n\n",
      "Each image is ", o.image_size, "x", o.image_size,
      " RGB: one saturated shape (circle, square, triangle) in one quadrant (top left, top right,\n",
      "bottom left, bottom right), coloured red, green, blue, yellow, purple or orange, on a light\n",
      "noisy grey background. No image appears twice within or across the splits.\n\n",
      "train.jsonl / test.jsonl hold one conversation per line (ShareGPT / LLaMA-Factory form),\n",
      "image paths relative to this directory, and the question type:\n",
      "  color     What color is the shape?   -> red\n",
      "  shape     What shape is this?        -> circle\n",
      "  position  Where is the shape?        -> top left\n",
      "  caption   Describe the image.        -> a red circle in the top left\n",
      "Types cycle in that order over the records. Answers are short, for exact-match scoring.\n");
}

}  // namespace

void ShapesOptions::validate() const {
  MM_CHECK(train >= 0, "shapes dataset: train must be >= 0, got ", train);
  MM_CHECK(test >= 0, "shapes dataset: test must be >= 0, got ", test);
  MM_CHECK(train + test > 0, "shapes dataset: train + test must be > 0");
  MM_CHECK(train <= 999999 && test <= 999999, "shapes dataset: at most 999999 records per split");
  MM_CHECK(image_size >= 28 && image_size <= 2048,
           "shapes dataset: image_size must be in [28, 2048], got ", image_size);
}

const std::vector<std::string>& shapes_colors() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& c : kColours) v.emplace_back(c.name);
    return v;
  }();
  return names;
}

const std::vector<std::string>& shapes_kinds() {
  static const std::vector<std::string> names(kKinds.begin(), kKinds.end());
  return names;
}

const std::vector<std::string>& shapes_positions() {
  static const std::vector<std::string> names(kPositions.begin(), kPositions.end());
  return names;
}

void write_shapes_dataset(const std::filesystem::path& out_dir, const ShapesOptions& options) {
  options.validate();
  namespace fs = std::filesystem;
  std::error_code ec;
  MM_CHECK(!fs::exists(out_dir, ec) || fs::is_directory(out_dir, ec), out_dir.string(),
           ": exists and is not a directory");
  for (const char* split : {"train", "test"}) {
    fs::create_directories(out_dir / "images" / split, ec);
    MM_CHECK(!ec, out_dir.string(), ": cannot create images/", split, ": ", ec.message());
  }

  std::unordered_set<uint64_t> seen;  // pixel hashes over both splits
  int64_t redraws = 0;
  for (const auto& [split, count, tag] : {std::tuple{"train", options.train, 1ull},
                                          std::tuple{"test", options.test, 2ull}}) {
    std::string jsonl;
    for (int64_t i = 0; i < count; ++i) {
      // Hashed, not xor-ed, together: seeds that differ in any bit share no image streams.
      SplitMix64 keys{SplitMix64{SplitMix64{options.seed}.next() + tag}.next() + static_cast<uint64_t>(i)};
      Sample sample;
      for (;;) {
        sample = draw(keys.next(), options.image_size);
        if (seen.insert(synth::fnv1a(sample.pixels)).second) break;
        ++redraws;
      }
      const std::string image = str_cat("images/", split, "/", synth::record_id(i), ".png");
      auto pixels = torch::from_blob(sample.pixels.data(), {options.image_size, options.image_size, 3},
                                     torch::kUInt8);
      write_png(out_dir / image, pixels);

      const Question& q = kQuestions[static_cast<size_t>(i) % kQuestions.size()];
      const std::string colour = kColours[sample.colour].name;
      const std::string kind = kKinds[sample.kind];
      const std::string position = kPositions[sample.position];
      std::string answer = q.type == std::string("color")   ? colour
                           : q.type == std::string("shape") ? kind
                           : q.type == std::string("position")
                               ? position
                               : str_cat("a ", colour, " ", kind, " in the ", position);
      nlohmann::ordered_json record;
      record["messages"] = nlohmann::ordered_json::array(
          {{{"role", "user"}, {"content", str_cat("<image>", q.prompt)}},
           {{"role", "assistant"}, {"content", answer}}});
      record["images"] = {image};
      record["type"] = q.type;
      jsonl += record.dump() + "\n";
    }
    write_file_atomic(out_dir / str_cat(split, ".jsonl"), jsonl);
  }
  write_file_atomic(out_dir / "README.txt", readme(options));
  if (redraws > 0) log::debug("shapes dataset: redrew ", redraws, " duplicate images");
}

}  // namespace mm
