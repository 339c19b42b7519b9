// FFmpeg encoding: RGB24 frames converted to yuv420p by swscale, encoded frame by frame, muxed
// into a temporary file that is renamed into place after the trailer is written.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include "mm/media/video_encode.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "mm/core/error.h"
#include "mm/media/ffmpeg_common.h"
#include "mm/media/image_encode.h"

namespace mm {
namespace {

namespace fs = std::filesystem;
using namespace ffmpeg;

struct OutputDeleter {
  void operator()(AVFormatContext* p) const {
    if (p->pb) avio_closep(&p->pb);
    avformat_free_context(p);
  }
};

// Removes the temporary file on every exit path but the successful rename.
struct TempFile {
  fs::path path;
  bool committed = false;
  ~TempFile() {
    if (!committed) {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  }
};

const AVCodec* find_encoder(const std::string& name, const std::string& path) {
  if (name == "auto") {
    if (const AVCodec* x264 = avcodec_find_encoder_by_name("libx264")) return x264;
    const AVCodec* mpeg4 = avcodec_find_encoder_by_name("mpeg4");
    MM_CHECK(mpeg4, path, ": this FFmpeg build has neither the libx264 nor the mpeg4 encoder");
    return mpeg4;
  }
  const AVCodec* codec = avcodec_find_encoder_by_name(name.c_str());
  MM_CHECK(codec, path, ": this FFmpeg build has no ", name, " encoder");
  return codec;
}

// uint8 [T, H, W, 3] on the CPU, contiguous, with an odd H or W padded by repeating the edge.
at::Tensor even_frames(const at::Tensor& frames) {
  at::Tensor out = frames.to(at::kCPU);
  if (out.size(1) % 2) out = torch::cat({out, out.narrow(1, out.size(1) - 1, 1)}, 1);
  if (out.size(2) % 2) out = torch::cat({out, out.narrow(2, out.size(2) - 1, 1)}, 2);
  return out.contiguous();
}

// Encodes and muxes everything into `format` (whose file is open).
class PacketSink {
 public:
  PacketSink(AVFormatContext* format, AVCodecContext* codec, AVStream* stream, std::string path)
      : format_(format), codec_(codec), stream_(stream), path_(std::move(path)),
        packet_(av_packet_alloc()) {
    MM_CHECK(packet_, path_, ": out of memory allocating a packet");
  }

  // nullptr flushes the encoder.
  void send(const AVFrame* frame) {
    const int rc = avcodec_send_frame(codec_, frame);
    MM_CHECK(rc >= 0, path_, ": cannot encode frame ", frame ? frame->pts : -1, ": ", error_string(rc));
    for (;;) {
      const int got = avcodec_receive_packet(codec_, packet_.get());
      if (got == AVERROR(EAGAIN) || got == AVERROR_EOF) return;
      MM_CHECK(got >= 0, path_, ": encoding failed: ", error_string(got));
      av_packet_rescale_ts(packet_.get(), codec_->time_base, stream_->time_base);
      packet_->stream_index = stream_->index;
      const int written = av_interleaved_write_frame(format_, packet_.get());
      MM_CHECK(written >= 0, path_, ": cannot write a packet: ", error_string(written));
    }
  }

 private:
  AVFormatContext* format_;
  AVCodecContext* codec_;
  AVStream* stream_;
  std::string path_;
  std::unique_ptr<AVPacket, PacketDeleter> packet_;
};

}  // namespace

void VideoEncodeOptions::validate() const {
  MM_CHECK(std::isfinite(fps) && fps > 0 && fps <= 1000, "video encoding: fps must be in (0, 1000], got ",
           fps);
  MM_CHECK(crf >= 0 && crf <= 51, "video encoding: crf must be in [0, 51], got ", crf);
  MM_CHECK(encoder == "auto" || encoder == "libx264" || encoder == "mpeg4",
           "video encoding: encoder must be auto, libx264 or mpeg4, got '", encoder, "'");
}

void check_video_output_path(const fs::path& path) {
  std::string extension = path.extension().string();
  for (auto& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  MM_CHECK(extension == ".mp4" || extension == ".mov" || extension == ".mkv", path.string(),
           ": cannot write H.264 video to a '", extension, "' file (use .mp4, .mov or .mkv)");
  const fs::path parent = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code ec;
  MM_CHECK(fs::is_directory(parent, ec), path.string(), ": the folder ", parent.string(), " does not exist");
}

WrittenVideo write_video(const fs::path& path, const at::Tensor& frames, const VideoEncodeOptions& options) {
  const std::string name = path.string();
  try {
    options.validate();
  } catch (const Error& e) {
    fail(name, ": ", e.what());
  }
  MM_CHECK(frames.defined() && frames.dim() == 4 && frames.size(3) == 3 &&
               frames.scalar_type() == at::kByte,
           name, ": write_video expects uint8 [frames, height, width, 3] RGB, got ",
           frames.defined() ? frames.sizes() : at::IntArrayRef{}, " ",
           frames.defined() ? std::string(c10::toString(frames.scalar_type())) : "undefined");
  MM_CHECK(frames.size(0) > 0 && frames.size(1) > 0 && frames.size(2) > 0 && frames.size(1) <= 16384 &&
               frames.size(2) <= 16384,
           name, ": cannot write a video of size ", frames.sizes());
  const at::Tensor pixels = even_frames(frames);
  const int64_t count = pixels.size(0);
  const int height = static_cast<int>(pixels.size(1)), width = static_cast<int>(pixels.size(2));

  // Declared before the muxer, so the file is closed before an unfinished one is removed.
  fs::path temp_path = path;
  temp_path += ".tmp";
  TempFile temp{temp_path};
  const AVOutputFormat* container = av_guess_format(nullptr, name.c_str(), nullptr);
  MM_CHECK(container, name, ": no video container for the extension '", path.extension().string(),
           "' (use .mp4, .mov or .mkv)");
  AVFormatContext* raw_format = nullptr;
  const int alloc_rc = avformat_alloc_output_context2(&raw_format, container, nullptr, name.c_str());
  MM_CHECK(alloc_rc >= 0 && raw_format, name, ": cannot create the ", container->name, " muxer: ",
           error_string(alloc_rc));
  std::unique_ptr<AVFormatContext, OutputDeleter> format(raw_format);
  format->flags |= AVFMT_FLAG_BITEXACT;

  const AVCodec* codec = find_encoder(options.encoder, name);
  std::unique_ptr<AVCodecContext, CodecDeleter> encoder(avcodec_alloc_context3(codec));
  MM_CHECK(encoder, name, ": out of memory allocating the ", codec->name, " encoder");
  const AVRational rate = av_d2q(options.fps, 100000);
  encoder->width = width;
  encoder->height = height;
  encoder->pix_fmt = AV_PIX_FMT_YUV420P;
  encoder->framerate = rate;
  encoder->time_base = av_inv_q(rate);
  encoder->sample_aspect_ratio = AVRational{1, 1};
  encoder->colorspace = AVCOL_SPC_SMPTE170M;
  encoder->color_range = AVCOL_RANGE_MPEG;
  encoder->thread_count = 1;  // reproducible bytes; encoding is cheap next to making the frames
  encoder->flags |= AV_CODEC_FLAG_BITEXACT;
  // libx264 prints its settings and statistics at info level for every file; shifting this
  // encoder's messages one level down keeps them out of stderr, warnings and errors still reach it.
  encoder->log_level_offset = AV_LOG_VERBOSE - AV_LOG_INFO;
  if (format->oformat->flags & AVFMT_GLOBALHEADER) encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* codec_opts = nullptr;
  if (std::string(codec->name) == "libx264") {
    av_dict_set(&codec_opts, "preset", "medium", 0);
    av_dict_set_int(&codec_opts, "crf", options.crf, 0);
    // Without macroblock-tree rate control: x264 core 164's AVX-512 mbtree code makes the bytes
    // depend on what the process encoded before (the same frames gave different files within one
    // process; with mbtree off, or AVX2 code, they do not). Costs file size: +23% at crf 18 on
    // ffmpeg's testsrc2 at 320x240.
    av_dict_set(&codec_opts, "x264-params", "mbtree=0", 0);
  } else {
    const double q = std::round(3.0 * std::pow(2.0, (options.crf - 18) / 6.0));
    encoder->flags |= AV_CODEC_FLAG_QSCALE;
    encoder->global_quality = static_cast<int>(FF_QP2LAMBDA * std::clamp(q, 1.0, 31.0));
  }
  const int open_rc = avcodec_open2(encoder.get(), codec, &codec_opts);
  av_dict_free(&codec_opts);
  MM_CHECK(open_rc >= 0, name, ": cannot open the ", codec->name, " encoder for ", width, "x", height,
           " at ", options.fps, " fps: ", error_string(open_rc));

  AVStream* stream = avformat_new_stream(format.get(), nullptr);
  MM_CHECK(stream, name, ": cannot add a video stream");
  MM_CHECK(avcodec_parameters_from_context(stream->codecpar, encoder.get()) >= 0, name,
           ": cannot copy the encoder parameters to the stream");
  stream->time_base = encoder->time_base;
  stream->avg_frame_rate = rate;

  const int io_rc = avio_open(&format->pb, temp_path.string().c_str(), AVIO_FLAG_WRITE);
  MM_CHECK(io_rc >= 0, name, ": cannot open ", temp_path.string(), " for writing: ", error_string(io_rc));
  const int header_rc = avformat_write_header(format.get(), nullptr);
  MM_CHECK(header_rc >= 0, name, ": cannot write the ", format->oformat->name, " header: ",
           error_string(header_rc));

  std::unique_ptr<SwsContext, SwsDeleter> sws(
      sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                     SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, nullptr, nullptr, nullptr));
  MM_CHECK(sws, name, ": cannot convert RGB to yuv420p");
  // Full-range RGB in, BT.601 limited-range YUV out: what the stream is tagged with.
  const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
  sws_setColorspaceDetails(sws.get(), bt601, 1, bt601, 0, 0, 1 << 16, 1 << 16);

  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  MM_CHECK(frame, name, ": out of memory allocating a frame");
  frame->format = AV_PIX_FMT_YUV420P;
  frame->width = width;
  frame->height = height;
  frame->colorspace = AVCOL_SPC_SMPTE170M;
  frame->color_range = AVCOL_RANGE_MPEG;
  MM_CHECK(av_frame_get_buffer(frame.get(), 0) >= 0, name, ": out of memory allocating a frame");

  PacketSink sink(format.get(), encoder.get(), stream, name);
  const auto* rgb = pixels.data_ptr<uint8_t>();
  const size_t frame_bytes = static_cast<size_t>(height) * width * 3;
  for (int64_t i = 0; i < count; ++i) {
    // The encoder may still hold the previous buffer (lookahead): write into a fresh one.
    MM_CHECK(av_frame_make_writable(frame.get()) >= 0, name, ": out of memory allocating a frame");
    const uint8_t* src[4] = {rgb + i * frame_bytes, nullptr, nullptr, nullptr};
    const int src_stride[4] = {3 * width, 0, 0, 0};
    sws_scale(sws.get(), src, src_stride, 0, height, frame->data, frame->linesize);
    frame->pts = i;
    frame->quality = encoder->global_quality;  // the mpeg4 encoder's fixed quantiser (0 for x264)
    sink.send(frame.get());
  }
  sink.send(nullptr);
  const int trailer_rc = av_write_trailer(format.get());
  MM_CHECK(trailer_rc >= 0, name, ": cannot finish the file: ", error_string(trailer_rc));
  const int close_rc = avio_closep(&format->pb);
  MM_CHECK(close_rc >= 0, name, ": cannot close ", temp_path.string(), ": ", error_string(close_rc));

  std::error_code ec;
  fs::rename(temp_path, path, ec);
  MM_CHECK(!ec, name, ": cannot rename ", temp_path.string(), " into place: ", ec.message());
  temp.committed = true;
  return {codec->name, avcodec_get_name(codec->id), count, width, height};
}

void write_frames_png(const fs::path& dir, const at::Tensor& frames) {
  MM_CHECK(frames.defined() && frames.dim() == 4 && frames.size(3) == 3 &&
               frames.scalar_type() == at::kByte,
           dir.string(), ": write_frames_png expects uint8 [frames, height, width, 3] RGB, got ",
           frames.defined() ? frames.sizes() : at::IntArrayRef{}, " ",
           frames.defined() ? std::string(c10::toString(frames.scalar_type())) : "undefined");
  MM_CHECK(frames.size(0) > 0 && frames.size(0) <= 1000000, dir.string(),
           ": cannot write ", frames.size(0), " frames (1 to 1000000)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  MM_CHECK(!ec, dir.string(), ": cannot create the frame directory: ", ec.message());
  for (int64_t i = 0; i < frames.size(0); ++i) {
    char file[32];
    std::snprintf(file, sizeof file, "frame_%06lld.png", static_cast<long long>(i));
    write_png(dir / file, frames[i]);
  }
}

}  // namespace mm
