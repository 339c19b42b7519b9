#include <fstream>

#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::golden_dir;
using mm::testing::temp_dir;

namespace {

torch::Tensor expected_base() {
  return torch::arange(24, torch::kDouble).reshape({2, 3, 4}) - 11.5;
}

// Writes a file with the given raw header JSON and data bytes.
fs::path write_raw(const fs::path& dir, const std::string& name, const std::string& header,
                   size_t data_bytes, uint64_t header_len_override = 0) {
  fs::path p = dir / name;
  std::ofstream out(p, std::ios::binary);
  uint64_t len = header_len_override ? header_len_override : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
  return p;
}

}  // namespace

TEST(Safetensors, ReadsEveryDtypeWrittenByTheReferenceLibrary) {
  auto file = mm::SafetensorsFile::open(golden_dir("safetensors_files") / "all_dtypes.safetensors");
  EXPECT_EQ(file->metadata().at("note"), "oracle");
  const auto base = expected_base();
  const std::vector<std::pair<std::string, torch::Tensor>> expected = {
      {"f64", base}, {"f32", base.to(torch::kFloat)}, {"f16", base.to(torch::kHalf)},
      {"bf16", base.to(torch::kBFloat16)}, {"i64", base.to(torch::kLong)},
      {"i32", base.to(torch::kInt)}, {"i16", base.to(torch::kShort)},
      {"i8", base.to(torch::kChar)}, {"u8", (base + 12).to(torch::kByte)}, {"bool", base > 0}};
  for (const auto& [name, want] : expected) {
    torch::Tensor got = file->tensor(name);
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(got, want)) << name;
  }
  EXPECT_EQ(file->tensor("scalar").dim(), 0);
  EXPECT_EQ(file->tensor("scalar").item<float>(), 3.25f);
  EXPECT_EQ(file->tensor("empty").sizes(), (std::vector<int64_t>{0, 5}));
}

TEST(Safetensors, TensorsStayValidAfterTheFileObjectIsGoneAndWritesStayPrivate) {
  const auto path = golden_dir("safetensors_files") / "all_dtypes.safetensors";
  torch::Tensor t = mm::SafetensorsFile::open(path)->tensor("f32");
  t.add_(1000);  // copy-on-write mapping: must not reach the file
  auto again = mm::SafetensorsFile::open(path)->tensor("f32");
  EXPECT_TRUE(torch::equal(again, expected_base().to(torch::kFloat)));
}

// load_weights drops each checkpoint tensor's pages once copied. Proof that the pages really go:
// a private in-place change to the view is gone afterwards (the file is read again), except in
// the partial pages at either end, which neighbours may share. Other tensors are left alone.
TEST(Safetensors, ReleasedPagesAreReadAgainFromTheFile) {
  const auto dir = temp_dir("release_pages");
  const auto original = torch::arange(1024 * 1024, torch::kFloat);  // 4 MiB: many whole pages
  mm::save_safetensors(dir / "big.safetensors", {{"x", original}});
  auto view = mm::SafetensorsFile::open(dir / "big.safetensors")->tensor("x");
  view.fill_(-1);
  mm::release_mapped_pages(view);
  const auto kept = view.ne(original);
  const double page_share = static_cast<double>(::sysconf(_SC_PAGESIZE)) / (4 << 20);
  EXPECT_LE(kept.to(torch::kDouble).mean().item<double>(), 2 * page_share);  // at most the two partial pages
  EXPECT_TRUE(view.index({kept}).eq(-1).all().item<bool>());

  auto own = original.clone().fill_(-1);
  mm::release_mapped_pages(own);  // not a mapping: untouched
  EXPECT_TRUE(torch::equal(own, torch::full_like(original, -1)));
  mm::release_mapped_pages(torch::Tensor());
  fs::remove_all(dir);
}

TEST(Safetensors, ShardedCheckpointThroughIndex) {
  auto ckpt = mm::Checkpoint::open(golden_dir("safetensors_files") / "sharded");
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a.weight", "b.bias", "c.weight"}));
  EXPECT_TRUE(torch::equal(ckpt.tensor("b.bias"), torch::arange(3.0)));
  EXPECT_EQ(ckpt.tensor("c.weight").scalar_type(), torch::kBFloat16);
  EXPECT_THROW_MSG(ckpt.tensor("nope"), "has no tensor 'nope'");
}

TEST(Safetensors, WrittenFilesReadBackByTheReferenceLibrary) {
  auto dir = temp_dir("st_write");
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"w", torch::arange(12, torch::kFloat).reshape({3, 4}).t()},  // non-contiguous
      {"h", torch::ones({5}, torch::kBFloat16)},
      {"m", torch::tensor({true, false, true})}};
  mm::save_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}});
  auto back = mm::SafetensorsFile::open(dir / "x.safetensors");
  for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(back->tensor(name), t)) << name;

  const std::string check =
      "import sys, torch; from safetensors.torch import load_file; "
      "d = load_file(sys.argv[1]); "
      "assert torch.equal(d['w'], torch.arange(12.).reshape(3, 4).t()), d['w']; "
      "assert d['h'].dtype == torch.bfloat16 and d['h'].sum().item() == 5; "
      "assert d['m'].tolist() == [True, False, True]; print('ok')";
  auto [rc, out] = mm::testing::run_command(mm::testing::kPython + " -c \"" +
                                            check + "\" " + (dir / "x.safetensors").string());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_FALSE(fs::exists(dir / ("x.safetensors.tmp." + std::to_string(::getpid()))));
}

TEST(Safetensors, ShardedWriteRoundTrips) {
  auto dir = temp_dir("st_shards");
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (int i = 0; i < 5; ++i) tensors.push_back({std::string("t").append(std::to_string(i)), torch::full({256}, float(i))});
  mm::save_checkpoint(dir, tensors, /*max_shard_bytes=*/2048);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  auto ckpt = mm::Checkpoint::open(dir);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(ckpt.tensor(name), t));
}

TEST(SafetensorsErrors, NameTheFileAndTheTensor) {
  auto dir = temp_dir("st_bad");
  auto short_file = write_raw(dir, "short.safetensors", "", 0, 0);
  fs::resize_file(short_file, 3);
  EXPECT_THROW_MSG(mm::SafetensorsFile::open(short_file), "short.safetensors: not a safetensors file");

  EXPECT_THROW_MSG(mm::SafetensorsFile::open(write_raw(dir, "huge.safetensors", "{}", 0, 1ull << 40)),
                   "larger than the 100 MiB limit");
  EXPECT_THROW_MSG(mm::SafetensorsFile::open(write_raw(dir, "trunc_header.safetensors", "{}", 0, 500)),
                   "truncated: header says 500 bytes");
  EXPECT_THROW_MSG(mm::SafetensorsFile::open(write_raw(dir, "bad_json.safetensors", "{\"a\": [", 0)),
                   "bad_json.safetensors: malformed JSON header");
  EXPECT_THROW_MSG(
      mm::SafetensorsFile::open(write_raw(
          dir, "range.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)),
      "tensor 'w': data_offsets [0, 16] lie outside the data buffer of 8 bytes");
  EXPECT_THROW_MSG(
      mm::SafetensorsFile::open(write_raw(
          dir, "dtype.safetensors", R"({"w":{"dtype":"F8_E9","shape":[1],"data_offsets":[0,1]}})", 1)),
      "tensor 'w' has unsupported dtype 'F8_E9'");
  EXPECT_THROW_MSG(
      mm::SafetensorsFile::open(write_raw(
          dir, "count.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
      "count.safetensors: tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets span 8");
  EXPECT_THROW_MSG(
      mm::SafetensorsFile::open(write_raw(dir, "entry.safetensors", R"({"w":{"dtype":"F32"}})", 0)),
      "tensor 'w': header entry needs dtype, shape and data_offsets");

  // A truncated copy of a real file.
  auto real = golden_dir("safetensors_files") / "all_dtypes.safetensors";
  fs::copy_file(real, dir / "cut.safetensors");
  fs::resize_file(dir / "cut.safetensors", fs::file_size(real) - 10);
  EXPECT_THROW_MSG(mm::SafetensorsFile::open(dir / "cut.safetensors"), "cut.safetensors: tensor '");

  // An index that names a shard that is not there.
  fs::create_directories(dir / "ckpt");
  std::ofstream(dir / "ckpt" / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})";
  EXPECT_THROW_MSG(mm::Checkpoint::open(dir / "ckpt"), "lists shard model-00001-of-00002.safetensors which does not exist");
  EXPECT_THROW_MSG(mm::Checkpoint::open(dir / "missing"), "does not exist");
}
