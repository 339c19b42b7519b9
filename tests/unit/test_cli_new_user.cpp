// What a new user hits on the command line (issue 12), end to end through the CLI: export and
// convert never write over a user's files or into a run, a finished run changes nothing, usage
// errors exit 2, --version and `models`, launch without `--`, rank tags and one summary under
// Slurm, eval naming the record whose image is missing, t2v refusing before it samples.
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "mm/core/device.h"
#include "mm/core/progress.h"
#include "test_files.h"
#include "testing.h"

namespace fs = std::filesystem;
using mm::testing::read_file;
using mm::testing::kMmtrain;
using mm::testing::kSourceDir;
using mm::testing::run_command;

namespace {

const fs::path kTemplate = kSourceDir / "examples" / "qwen2.5vl" / "tiny-shapes";

// Every file under `dir` with its bytes and modification time: equal snapshots, nothing written.
std::map<std::string, std::pair<std::string, fs::file_time_type>> snapshot(const fs::path& dir) {
  std::map<std::string, std::pair<std::string, fs::file_time_type>> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = {read_file(e.path()), e.last_write_time()};
  return files;
}

struct TinyRun {
  fs::path work, data, config, run;
};

// A 4-step run of the tiny-shapes template, made once per test binary.
const TinyRun& tiny_run() {
  static const TinyRun r = [] {
    TinyRun t;
    t.work = mm::testing::temp_dir("cli_new_user");
    t.data = t.work / "data";
    auto [s, o] = run_command(kMmtrain + " data synth --kind shapes --out " + t.data.string() +
                              " --train 16 --test 4 --seed 2");
    EXPECT_EQ(s, 0) << o;
    t.run = t.work / "run";
    t.config = t.work / "run.yaml";
    std::ofstream(t.config) << "model:\n  path: " << kTemplate.string() << "\n  from_scratch: true\n"
                            << "data:\n  train: " << (t.data / "train.jsonl").string() << "\n  num_workers: 1\n"
                            << "train:\n  micro_batch_size: 4\n  max_steps: 4\n  threads: 1\n  device: cpu\n"
                            << "optim:\n  lr: 1.0e-3\n"
                            << "output:\n  dir: " << t.run.string() << "\n  save_every: 2\n  tensorboard: false\n";
    auto [status, out] = run_command(kMmtrain + " train " + t.config.string());
    EXPECT_EQ(status, 0) << out;
    return t;
  }();
  return r;
}

}  // namespace

TEST(CliNewUser, ExportRefusesANonEmptyTargetAndKeepsItsFiles) {
  const auto& r = tiny_run();
  const auto target = r.work / "mine";
  fs::create_directories(target);
  std::ofstream(target / "notes.txt") << "my notes";
  auto [status, out] = run_command(kMmtrain + " export --checkpoint " + r.run.string() + " --to-hf " + target.string());
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("already exists and is not empty"), std::string::npos) << out;
  EXPECT_EQ(read_file(target / "notes.txt"), "my notes");
  EXPECT_EQ(std::distance(fs::directory_iterator(target), fs::directory_iterator()), 1);
}

TEST(CliNewUser, ExportAndConvertRefuseTargetsInsideARun) {
  const auto& r = tiny_run();
  const auto before = snapshot(r.run);
  for (const auto& target : {r.run, r.run / "hf", r.run / "checkpoints" / "hf", r.run / "final" / "x"}) {
    auto [status, out] =
        run_command(kMmtrain + " export --checkpoint " + r.run.string() + " --to-hf " + target.string());
    EXPECT_EQ(status, 1) << target << ": " << out;
    auto [cstatus, cout] = run_command(kMmtrain + " convert --from " + r.run.string() + " --to " + target.string());
    EXPECT_EQ(cstatus, 1) << target << ": " << cout;
  }
  auto [status, out] = run_command(kMmtrain + " export --checkpoint " + r.run.string() + " --to-hf " +
                                   (r.run / "hf").string());
  EXPECT_NE(out.find("is inside the training output " + r.run.string()), std::string::npos) << out;
  EXPECT_EQ(snapshot(r.run), before) << "a refused export or convert changed the run";
  // A new directory elsewhere works.
  auto [ok, ok_out] = run_command(kMmtrain + " export --checkpoint " + r.run.string() + " --to-hf " +
                                  (r.work / "exported").string());
  EXPECT_EQ(ok, 0) << ok_out;
  EXPECT_TRUE(fs::is_regular_file(r.work / "exported" / "model.safetensors"));
}

TEST(CliNewUser, TheExportKeepsTheModelDirectorysConfigKeys) {
  const auto& r = tiny_run();
  const auto exported = r.work / "exported_config";
  auto [status, out] = run_command(kMmtrain + " export --checkpoint " + r.run.string() + " --to-hf " + exported.string());
  ASSERT_EQ(status, 0) << out;
  const auto source = nlohmann::json::parse(read_file(kTemplate / "config.json"));
  const auto written = nlohmann::json::parse(read_file(exported / "config.json"));
  EXPECT_EQ(written["text_config"]["bos_token_id"], source["text_config"]["bos_token_id"]);
  EXPECT_EQ(written["text_config"]["pad_token_id"], source["text_config"]["pad_token_id"]);
  EXPECT_EQ(written["text_config"]["layer_types"], source["text_config"]["layer_types"]);
  EXPECT_EQ(written["vision_config"]["model_type"], source["vision_config"]["model_type"]);
  EXPECT_EQ(written["dtype"], "float32");
}

TEST(CliNewUser, RerunningAFinishedRunSaysSoAndChangesNothing) {
  const auto& r = tiny_run();
  const auto before = snapshot(r.run);
  auto [status, out] = run_command(kMmtrain + " train " + r.config.string(), /*with_stderr=*/false);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("nothing to do: the run in " + r.run.string() + " already finished its 4 steps"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("trained"), std::string::npos) << out;
  EXPECT_EQ(snapshot(r.run), before) << "rerunning a finished run wrote into it";
}

TEST(CliNewUser, UsageErrorsExitWith2) {
  const auto& r = tiny_run();
  const std::vector<std::string> usage_errors = {" train " + r.config.string() + " --set optim.lr",
                                                 " data synth --kind foo --out " + (r.work / "never").string(),
                                                 " --log-level verbose models", " launch --nproc-per-node 1"};
  for (const std::string& args : usage_errors) {
    auto [status, out] = run_command(kMmtrain + args);
    EXPECT_EQ(status, 2) << args << ": " << out;
    EXPECT_EQ(out.rfind("mmtrain: error: ", 0), 0u) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one line: " << out;
  }
  EXPECT_FALSE(fs::exists(r.work / "never"));
  // --log-level after the subcommand is the same option.
  auto [status, out] = run_command(kMmtrain + " models --log-level warn");
  EXPECT_EQ(status, 0) << out;
}

TEST(CliNewUser, VersionAndSupportedModels) {
  auto [status, out] = run_command(kMmtrain + " --version");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.rfind("mmtrain 0.", 0), 0u) << out;
  EXPECT_NE(out.find("libtorch"), std::string::npos) << out;
  // Whether this build can use a GPU, and whether it sees one.
  EXPECT_TRUE(out.find("CUDA built in") != std::string::npos || out.find("CPU-only libtorch") != std::string::npos)
      << out;
  // And the kernels the models' attention runs there: libtorch's SDPA choice for dense batches,
  // and what packed samples and vision windows take (nn/varlen_attention.h); and whether NCCL is
  // built in (it is against a CUDA torch).
  EXPECT_TRUE(std::regex_search(out, std::regex("; attention: (flash_attention|efficient_attention|cudnn_attention|math)"
                                                ", packed: (flash_varlen|sdpa_per_length) on (cpu|cuda:0); NCCL: "
                                                "(built in|not built)\\)")))
      << out;
#ifdef MM_TORCH_CUDA
  EXPECT_NE(out.find("NCCL: built in"), std::string::npos) << out;
#endif
  auto [mstatus, models] = run_command(kMmtrain + " models");
  EXPECT_EQ(mstatus, 0);
  for (const char* key : {"qwen2_5_vl", "WanPipeline", "WanImageToVideoPipeline"})
    EXPECT_NE(models.find(key), std::string::npos) << models;
}

TEST(CliNewUser, LaunchTakesTheWorkerCommandWithOrWithoutDoubleDash) {
  for (const std::string& sep : {std::string(), std::string("-- ")}) {
    auto [status, out] = run_command(kMmtrain + " launch --nproc-per-node 1 --master-port " +
                                     std::to_string(mm::testing::free_port()) + " --program echo " + sep +
                                     "train x.yaml --set a=b");
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("\ntrain x.yaml --set a=b\n"), std::string::npos) << out;
  }
}

TEST(CliNewUser, SlurmRanksTagTheirLogsAndOnlyRank0PrintsTheSummary) {
  const auto& r = tiny_run();
  const auto run = r.work / "slurm_run";
  const std::string common = "SLURM_NTASKS=2 SLURM_NNODES=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                             std::to_string(mm::testing::free_port()) + " " + kMmtrain + " train " +
                             r.config.string() + " --set output.dir=" + run.string() + " --set output.save_every=0";
  const auto log0 = r.work / "slurm0.txt", log1 = r.work / "slurm1.txt";
  auto [status, out] = run_command("(SLURM_PROCID=0 SLURM_LOCALID=0 " + common + " >" + log0.string() +
                                   " 2>&1 & SLURM_PROCID=1 SLURM_LOCALID=1 " + common + " >" + log1.string() +
                                   " 2>&1; s1=$?; wait $!; s0=$?; exit $((s0 + s1)))");
  const auto out0 = read_file(log0), out1 = read_file(log1);
  ASSERT_EQ(status, 0) << out0 << "\n---\n" << out1;
  EXPECT_NE(out0.find(" rank0] "), std::string::npos) << out0;
  EXPECT_NE(out0.find("trained 4 steps"), std::string::npos) << out0;
  EXPECT_EQ(out1.find("trained"), std::string::npos) << out1;
  EXPECT_EQ(out1.find("[I "), std::string::npos) << "rank 1 printed info lines: " << out1;
}

TEST(CliNewUser, EvalNamesTheRecordWhoseImageIsMissing) {
  const auto& r = tiny_run();
  std::string records = read_file(r.data / "test.jsonl");
  const auto second = records.find("images/test/000001.png");
  ASSERT_NE(second, std::string::npos);
  records.replace(second, std::string("images/test/000001.png").size(), "images/test/gone.png");
  std::ofstream(r.data / "broken.jsonl") << records;
  auto [status, out] = run_command(kMmtrain + " eval --model " + (r.run / "final").string() + " --data " +
                                   (r.data / "broken.jsonl").string());
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("broken.jsonl:2: "), std::string::npos) << out;
  EXPECT_NE(out.find("gone.png"), std::string::npos) << out;
}

TEST(CliNewUser, TextToVideoRefusesBeforeSampling) {
  const auto wan_template = kSourceDir / "examples" / "wan" / "tiny-synth";
  const auto dir = mm::testing::temp_dir("t2v_refusals");
  auto [status, out] = run_command(kMmtrain + " infer t2v --model " + wan_template.string() + " --prompt x -o " +
                                   (dir / "x.gif").string());
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("cannot write H.264 video to a '.gif' file"), std::string::npos) << out;
  auto [tstatus, tout] = run_command(kMmtrain + " infer t2v --model " + wan_template.string() + " --prompt x -o " +
                                     (dir / "x.mp4").string());
  EXPECT_EQ(tstatus, 1) << tout;
  EXPECT_NE(tout.find("has no weights in text_encoder/, vae/, transformer/"), std::string::npos) << tout;
  EXPECT_NE(tout.find("examples/wan/README.md"), std::string::npos) << tout;
}

TEST(ProgressBar, TheFirstDrawShowsNoRateAndOffATerminalItReportsNowAndThen) {
  const auto dir = mm::testing::temp_dir("progress_rate");
  {
    std::FILE* f = std::fopen((dir / "bar.txt").c_str(), "w");
    mm::ProgressBar bar(100, "x", 0, f, /*enabled=*/true);
    bar.update(1);
    bar.finish();
    std::fclose(f);
  }
  const auto drawn = read_file(dir / "bar.txt");
  EXPECT_NE(drawn.find("1/100  0.00 it/s"), std::string::npos) << drawn;
  {
    std::FILE* f = std::fopen((dir / "report.txt").c_str(), "w");
    mm::ProgressBar bar(3, "eval", 0, f, /*enabled=*/false);
    bar.report_every(0.001);
    for (int i = 1; i <= 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      bar.update(i);
    }
    bar.finish();
    std::fclose(f);
  }
  const auto reported = read_file(dir / "report.txt");
  EXPECT_EQ(reported.find('\r'), std::string::npos) << reported;
  EXPECT_NE(reported.find("eval:  3/3  "), std::string::npos) << reported;
  EXPECT_GE(std::count(reported.begin(), reported.end(), '\n'), 3) << reported;
}

TEST(CliNewUser, MessagesFilesResolveMediaLikeDataFilesAndReadFileAndDataUrls) {
  const auto& r = tiny_run();
  const auto dir = r.work / "messages";
  fs::create_directories(dir / "pics");
  fs::copy_file(r.data / "images/test/000000.png", dir / "pics/a.png", fs::copy_options::overwrite_existing);
  auto [b64_status, b64] = run_command("base64 -w0 " + (dir / "pics/a.png").string(), /*with_stderr=*/false);
  ASSERT_EQ(b64_status, 0);
  auto write = [&](const std::string& name, const std::string& source) {
    std::ofstream(dir / name) << nlohmann::json::array(
        {{{"role", "user"},
          {"content", {{{"type", "image_url"}, {"image_url", {{"url", source}}}}, {{"type", "text"}, {"text", "What color is the shape?"}}}}}})
                                     .dump();
    return (dir / name).string();
  };
  const std::string infer = kMmtrain + " infer --greedy --max-new-tokens 4 --model " + (r.run / "final").string() + " --messages ";
  // Run from another folder: the relative path is the file's, not the working directory's.
  std::string answers[3];
  int i = 0;
  const std::vector<std::string> files = {write("relative.json", "pics/a.png"),
                                          write("file_url.json", "file://" + (dir / "pics/a.png").string()),
                                          write("data_url.json", "data:image/png;base64," + b64)};
  for (const std::string& file : files) {
    auto [status, out] = run_command("cd / && " + infer + file, /*with_stderr=*/false);
    EXPECT_EQ(status, 0) << file << ": " << out;
    answers[i++] = out;
  }
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_EQ(answers[0], answers[2]);
  auto [status, out] = run_command(infer + write("http.json", "https://example.com/" + std::string(500, 'x') + ".png"));
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("is a URL; mmtrain reads local files, file:// and data: URLs only"), std::string::npos) << out;
  EXPECT_LT(out.size(), 400u) << "the error echoes the whole source: " << out;
}

// The CUDA allocator's expandable segments are on by default (core/device.h), and a user's own
// allocator settings, under either of torch's names, are left as they are.
TEST(CliNewUser, ExpandableSegmentsAreTheDefaultUnlessConfigured) {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const char* value = std::getenv(name);
    saved.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    ::unsetenv(name);
  }
  EXPECT_EQ(mm::use_expandable_segments_by_default(), "expandable_segments:True");
  EXPECT_STREQ(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True");
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128", 1);
  EXPECT_EQ(mm::use_expandable_segments_by_default(), "max_split_size_mb:128");
  EXPECT_STREQ(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), "max_split_size_mb:128");
  ::unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  ::setenv("PYTORCH_ALLOC_CONF", "expandable_segments:False", 1);
  EXPECT_EQ(mm::use_expandable_segments_by_default(), "expandable_segments:False");
  EXPECT_EQ(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), nullptr);
  for (const auto& [name, value] : saved) value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
}

// Where a command computes (core/device.h): auto is the CPU on a machine without a GPU; asking for
// a GPU that is not there, or for no device at all, is one clear line before anything is loaded.
TEST(CliNewUser, DevicesAreCheckedBeforeAnythingLoads) {
  EXPECT_EQ(mm::resolve_device("auto", "--device"), c10::Device(c10::kCPU));
  EXPECT_EQ(mm::resolve_device("cpu", "--device"), c10::Device(c10::kCPU));
  EXPECT_THROW_MSG(mm::resolve_device("tpu", "--device"), "--device: 'tpu' is not a device (auto, cpu, cuda, cuda:N)");
  EXPECT_THROW_MSG(mm::resolve_device("cuda:x", "--device"), "is not a device");
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible: the no-GPU errors cannot be shown here";
  auto [s1, o1] = run_command(kMmtrain + " train " + tiny_run().config.string() + " --set train.device=cuda" +
                              " --set output.dir=" + (tiny_run().work / "cuda_run").string());
  EXPECT_EQ(s1, 1) << o1;
  EXPECT_NE(o1.find("train.device: 'cuda' needs a CUDA GPU, and libtorch sees none"), std::string::npos) << o1;
  EXPECT_FALSE(fs::exists(tiny_run().work / "cuda_run"));  // failed before creating anything
  auto [s2, o2] = run_command(kMmtrain + " train " + tiny_run().config.string() + " --set train.device=gpu");
  EXPECT_EQ(s2, 1) << o2;
  EXPECT_NE(o2.find("train.device: 'gpu' is not a device"), std::string::npos) << o2;
  auto [s3, o3] = run_command(kMmtrain + " infer --model " + (tiny_run().run / "final").string() +
                              " --prompt hi --device cuda:1");
  EXPECT_EQ(s3, 1) << o3;
  EXPECT_NE(o3.find("--device: 'cuda:1' needs a CUDA GPU"), std::string::npos) << o3;
  // The video commands too: sampling, and extracting features (nothing written in either case).
  const auto dir = mm::testing::temp_dir("video_devices");
  auto [s4, o4] = run_command(kMmtrain + " infer t2v --model " + (kSourceDir / "examples/wan/tiny-synth").string() +
                              " --prompt x --device cuda -o " + (dir / "x.mp4").string());
  EXPECT_EQ(s4, 1) << o4;
  EXPECT_NE(o4.find("--device: 'cuda' needs a CUDA GPU"), std::string::npos) << o4;
  auto [s5, o5] = run_command(kMmtrain + " extract " + (kSourceDir / "examples/wan/t2v_synth.yaml").string() +
                              " --device cuda --out " + (dir / "features").string());
  EXPECT_EQ(s5, 1) << o5;
  EXPECT_NE(o5.find("--device: 'cuda' needs a CUDA GPU"), std::string::npos) << o5;
  EXPECT_FALSE(fs::exists(dir / "x.mp4") || fs::exists(dir / "features"));
}
