// Image decoding against PIL's Image.open(f).convert("RGB") of files PIL wrote.
#include <nlohmann/json.hpp>

#include <fstream>

#include "mm/core/json_config.h"
#include "mm/media/image_decode.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;
using mm::testing::temp_dir;

namespace {

fs::path images_dir() { return golden_dir("qwen2_vl_processor") / "images"; }

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

fs::path write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

uint32_t crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

}  // namespace

TEST(ImageDecode, EqualsPilForEveryFileType) {
  const auto cases = mm::read_json_file(golden_dir("qwen2_vl_processor") / "cases.json");
  auto reference = mm::SafetensorsFile::open(golden_dir("qwen2_vl_processor") / "decoded.safetensors");
  double jpeg_max_diff = 0;
  for (const std::string name : cases["files"]) {
    SCOPED_TRACE(name + " (PIL mode " + cases["pil_modes"][name].get<std::string>() + ")");
    torch::Tensor got = mm::decode_image(images_dir() / name);
    torch::Tensor want = reference->tensor(name);
    ASSERT_EQ(got.scalar_type(), torch::kByte);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.is_contiguous());
    const double diff = mm::testing::max_abs_diff(got, want);
    if (name.ends_with(".jpg")) {
      jpeg_max_diff = std::max(jpeg_max_diff, diff);
      std::cout << "[ jpeg     ] " << name << " max |ours - PIL| = " << diff << "\n";
    }
    // PNG and WebP are lossless decodes: exact. JPEG: the same libjpeg-turbo IDCT and
    // upsampling as PIL's bundled copy gives the same pixels, so exact as well.
    EXPECT_EQ(diff, 0) << name;
  }
  RecordProperty("jpeg_max_abs_diff_vs_pil", std::to_string(jpeg_max_diff));
}

TEST(ImageDecode, FromMemoryAndFormatFromMagicBytesNotExtension) {
  const std::string png = read_bytes(images_dir() / "rgba_64x47.png");
  const auto* data = reinterpret_cast<const uint8_t*>(png.data());
  EXPECT_EQ(mm::detect_image_format(data, png.size()), mm::ImageFormat::kPng);
  torch::Tensor from_memory = mm::decode_image_bytes(data, png.size(), "mem.png");
  EXPECT_TRUE(torch::equal(from_memory, mm::decode_image(images_dir() / "rgba_64x47.png")));

  auto dir = temp_dir("image_ext");
  torch::Tensor misnamed = mm::decode_image(write_bytes(dir / "really_a_png.jpg", png));
  EXPECT_TRUE(torch::equal(misnamed, from_memory));
  const std::string webp = read_bytes(images_dir() / "lossy_57x43.webp");
  EXPECT_EQ(mm::detect_image_format(reinterpret_cast<const uint8_t*>(webp.data()), webp.size()),
            mm::ImageFormat::kWebp);
  const std::string jpeg = read_bytes(images_dir() / "photo_97x61.jpg");
  EXPECT_EQ(mm::detect_image_format(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size()),
            mm::ImageFormat::kJpeg);
}

TEST(ImageDecode, RgbaAlphaIsDroppedNotComposited) {
  // PIL's convert("RGB") (and so transformers' convert_to_rgb) drops alpha; fully transparent
  // pixels keep their colour rather than turning white.
  auto reference = mm::SafetensorsFile::open(golden_dir("qwen2_vl_processor") / "decoded.safetensors");
  torch::Tensor got = mm::decode_image(images_dir() / "rgba_64x47.png");
  EXPECT_TRUE(torch::equal(got, reference->tensor("rgba_64x47.png")));
  EXPECT_FALSE(torch::equal(got, torch::full_like(got, 255)));
}

TEST(ImageDecode, BrokenFilesFailNamingTheFile) {
  auto dir = temp_dir("image_errors");
  const fs::path text = write_bytes(dir / "notes.png", "this is not an image at all\n");
  EXPECT_THROW_MSG(mm::decode_image(text), "notes.png: is not a JPEG, PNG or WebP image");
  EXPECT_THROW_MSG(mm::decode_image(write_bytes(dir / "empty.jpg", "")), "empty.jpg: is empty");
  EXPECT_THROW_MSG(mm::decode_image(dir / "missing.png"), "missing.png: cannot open");
  EXPECT_THROW_MSG(mm::decode_image(write_bytes(dir / "anim.gif", "GIF89a\x01\x00\x01\x00")),
                   "(it is a GIF)");

  for (const std::string name : {"rgb_301x155.png", "photo_97x61.jpg", "progressive_50x40.jpg",
                                 "lossy_57x43.webp", "lossless_alpha_31x29.webp"}) {
    const std::string bytes = read_bytes(images_dir() / name);
    const fs::path cut = write_bytes(dir / ("cut_" + name), bytes.substr(0, bytes.size() / 2));
    EXPECT_THROW_MSG(mm::decode_image(cut), "cut_" + name + ": corrupt or truncated");
    const fs::path stub = write_bytes(dir / ("stub_" + name), bytes.substr(0, 12));
    EXPECT_THROW_MSG(mm::decode_image(stub), "stub_" + name);
  }

  // A PNG whose IHDR claims 100000 x 100000 pixels (valid CRCs), then a little image data:
  // refused before any pixel memory is allocated.
  const std::string ihdr = "IHDR" + be32(100000) + be32(100000) + std::string("\x08\x02\x00\x00\x00", 5);
  const std::string idat_chunk = "IDAT" + std::string("\x78\x9c\x03\x00", 4);
  const std::string bomb = std::string("\x89PNG\r\n\x1A\n", 8) + be32(13) + ihdr + be32(crc32(ihdr)) +
                           be32(4) + idat_chunk + be32(crc32(idat_chunk));
  EXPECT_THROW_MSG(mm::decode_image(write_bytes(dir / "bomb.png", bomb)),
                   "bomb.png: image of 100000x100000 pixels exceeds the decompression-bomb limit");

  // Corrupt image data with intact framing: a flipped byte inside the PNG's IDAT.
  std::string png = read_bytes(images_dir() / "rgb_37x53.png");
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  png[idat + 10] = static_cast<char>(png[idat + 10] ^ 0x55);
  EXPECT_THROW_MSG(mm::decode_image(write_bytes(dir / "flipped.png", png)), "flipped.png");
}
