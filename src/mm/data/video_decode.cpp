// FFmpeg decoding. Two sequential passes over the file: the first only demuxes and counts the
// video packets (one per frame), so the frame selection is known before any pixel is decoded;
// the second decodes and converts just the selected frames.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "mm/core/error.h"
#include "mm/data/video_decode.h"

namespace mm {
namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = "";
  av_strerror(code, buf, sizeof buf);
  return buf;
}

struct FormatDeleter {
  void operator()(AVFormatContext* p) const { avformat_close_input(&p); }
};
struct CodecDeleter {
  void operator()(AVCodecContext* p) const { avcodec_free_context(&p); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* p) const { av_frame_free(&p); }
};
struct SwsDeleter {
  void operator()(SwsContext* p) const { sws_freeContext(p); }
};
using FormatPtr = std::unique_ptr<AVFormatContext, FormatDeleter>;

// Opens the file and finds its best video stream.
FormatPtr open_video(const std::string& name, int* stream_index) {
  AVFormatContext* raw = nullptr;
  const int rc = avformat_open_input(&raw, name.c_str(), nullptr, nullptr);
  MM_CHECK(rc >= 0, name, ": cannot open as a video: ", av_error(rc));
  FormatPtr format(raw);
  const int info_rc = avformat_find_stream_info(format.get(), nullptr);
  MM_CHECK(info_rc >= 0, name, ": cannot read the video's stream info: ", av_error(info_rc));
  *stream_index = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  MM_CHECK(*stream_index >= 0, name, ": has no video stream (not a video file)");
  return format;
}

int64_t count_packets(const std::string& name) {
  int stream_index = -1;
  FormatPtr format = open_video(name, &stream_index);
  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  int64_t count = 0;
  while (av_read_frame(format.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream_index) ++count;
    av_packet_unref(packet.get());
  }
  return count;
}

double stream_fps(const AVStream* stream) {
  for (AVRational rate : {stream->avg_frame_rate, stream->r_frame_rate}) {
    if (rate.num > 0 && rate.den > 0) return av_q2d(rate);
  }
  return 0;
}

// Converts decoded frames (any pixel format and size) to RGB24 at the output size, honouring the
// frame's colour matrix and range.
class RgbConverter {
 public:
  RgbConverter(int width, int height) : width_(width), height_(height) {}
  void convert(const AVFrame* frame, uint8_t* out, const std::string& name) {
    sws_.reset(sws_getCachedContext(
        sws_.release(), frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
        width_, height_, AV_PIX_FMT_RGB24,
        SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP, nullptr,
        nullptr, nullptr));
    MM_CHECK(sws_, name, ": cannot convert pixel format ",
             av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format)), " to RGB");
    const int colorspace = frame->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT
                                                                        : frame->colorspace;
    const int src_range = frame->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
    int* inv_table = nullptr;
    int* table = nullptr;
    int src_range_now = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
    if (sws_getColorspaceDetails(sws_.get(), &inv_table, &src_range_now, &table, &dst_range,
                                 &brightness, &contrast, &saturation) >= 0) {
      const int* coefficients = sws_getCoefficients(colorspace);
      sws_setColorspaceDetails(sws_.get(), coefficients, src_range, table, 1, brightness,
                               contrast, saturation);
    }
    uint8_t* dst[4] = {out, nullptr, nullptr, nullptr};
    int dst_stride[4] = {3 * width_, 0, 0, 0};
    sws_scale(sws_.get(), frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
  }

 private:
  int width_, height_;
  std::unique_ptr<SwsContext, SwsDeleter> sws_;
};

}  // namespace

DecodedVideo decode_video(const std::filesystem::path& path, const VideoSampling& sampling) {
  const std::string name = path.string();
  MM_CHECK(std::filesystem::is_regular_file(path), name, ": no such video file");
  const int64_t total = count_packets(name);
  MM_CHECK(total > 0, name, ": the video has no frames");

  int stream_index = -1;
  FormatPtr format = open_video(name, &stream_index);
  AVStream* stream = format->streams[stream_index];
  const AVCodec* codec = avcodec_find_decoder(stream->codecpar->codec_id);
  MM_CHECK(codec, name, ": no decoder for codec ", avcodec_get_name(stream->codecpar->codec_id));
  std::unique_ptr<AVCodecContext, CodecDeleter> decoder(avcodec_alloc_context3(codec));
  MM_CHECK(avcodec_parameters_to_context(decoder.get(), stream->codecpar) >= 0, name,
           ": bad codec parameters");
  decoder->thread_count = 1;  // the data loader decodes many videos in parallel instead
  const int open_rc = avcodec_open2(decoder.get(), codec, nullptr);
  MM_CHECK(open_rc >= 0, name, ": cannot open the ", codec->name, " decoder: ", av_error(open_rc));
  const int width = stream->codecpar->width, height = stream->codecpar->height;
  MM_CHECK(width > 0 && height > 0, name, ": the video stream has no frame size");

  DecodedVideo video;
  video.fps = stream_fps(stream);
  video.total_frames = total;
  video.frame_indices = sample_frame_indices(total, video.fps, sampling, name);
  const int64_t kept = static_cast<int64_t>(video.frame_indices.size());
  video.frames = torch::empty({kept, height, width, 3}, torch::kByte);
  video.timestamps.reserve(kept);
  const double time_base = av_q2d(stream->time_base);
  const int64_t start = stream->start_time == AV_NOPTS_VALUE ? 0 : stream->start_time;

  RgbConverter converter(width, height);
  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  int64_t decoded = 0;  // index of the next decoded frame
  size_t next = 0;      // next entry of frame_indices to fill
  const size_t frame_bytes = size_t(height) * width * 3;
  auto receive_frames = [&]() {
    while (next < video.frame_indices.size()) {
      const int rc = avcodec_receive_frame(decoder.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      MM_CHECK(rc >= 0, name, ": cannot decode frame ", decoded, ": ", av_error(rc));
      while (next < video.frame_indices.size() && video.frame_indices[next] == decoded) {
        converter.convert(frame.get(), video.frames.data_ptr<uint8_t>() + next * frame_bytes, name);
        const int64_t pts = frame->best_effort_timestamp;
        video.timestamps.push_back(pts != AV_NOPTS_VALUE ? (pts - start) * time_base
                                     : video.fps > 0 ? decoded / video.fps : 0.0);
        ++next;
      }
      av_frame_unref(frame.get());
      ++decoded;
    }
  };
  while (next < video.frame_indices.size() && av_read_frame(format.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream_index) {
      const int rc = avcodec_send_packet(decoder.get(), packet.get());
      av_packet_unref(packet.get());
      MM_CHECK(rc >= 0 || rc == AVERROR_INVALIDDATA, name, ": cannot decode packet: ", av_error(rc));
      receive_frames();
    } else {
      av_packet_unref(packet.get());
    }
  }
  if (next < video.frame_indices.size()) {  // drain the decoder's delayed frames
    avcodec_send_packet(decoder.get(), nullptr);
    receive_frames();
  }
  MM_CHECK(next == video.frame_indices.size(), name, ": only ", decoded,
           " frames could be decoded of the ", total, " the container holds (corrupt video?)");
  return video;
}

}  // namespace mm
