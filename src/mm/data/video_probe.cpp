// The FFmpeg plumbing mirrors video_decode.cpp (whose helpers are private to it); the difference is
// an explicit index list and a per-frame callback instead of one tensor of all selected frames.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <torch/torch.h>

#include <memory>

#include "mm/core/error.h"
#include "mm/data/video_probe.h"

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

FormatPtr open_video(const std::string& name, int* stream_index) {
  MM_CHECK(std::filesystem::is_regular_file(name), name, ": no such video file");
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

double stream_fps(const AVStream* stream) {
  for (AVRational rate : {stream->avg_frame_rate, stream->r_frame_rate}) {
    if (rate.num > 0 && rate.den > 0) return av_q2d(rate);
  }
  return 0;
}

// RGB24 at the frame's own size with the frame's colour matrix and range, as decode_video does.
void to_rgb(std::unique_ptr<SwsContext, SwsDeleter>& sws_holder, const AVFrame* frame, uint8_t* out,
            const std::string& name) {
  const auto format = static_cast<AVPixelFormat>(frame->format);
  sws_holder.reset(sws_getCachedContext(sws_holder.release(), frame->width, frame->height, format, frame->width,
                                        frame->height, AV_PIX_FMT_RGB24,
                                        SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP,
                                        nullptr, nullptr, nullptr));
  SwsContext* sws = sws_holder.get();
  MM_CHECK(sws, name, ": cannot convert pixel format ", av_get_pix_fmt_name(format), " to RGB");
  const int colorspace = frame->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : frame->colorspace;
  const int src_range = frame->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
  int* inv_table = nullptr;
  int* table = nullptr;
  int src_range_now = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
  if (sws_getColorspaceDetails(sws, &inv_table, &src_range_now, &table, &dst_range, &brightness, &contrast,
                               &saturation) >= 0) {
    sws_setColorspaceDetails(sws, sws_getCoefficients(colorspace), src_range, table, 1, brightness, contrast,
                             saturation);
  }
  uint8_t* dst[4] = {out, nullptr, nullptr, nullptr};
  int dst_stride[4] = {3 * frame->width, 0, 0, 0};
  sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
}

}  // namespace

VideoProbe probe_video(const std::filesystem::path& path) {
  const std::string name = path.string();
  int stream_index = -1;
  FormatPtr format = open_video(name, &stream_index);
  const AVStream* stream = format->streams[stream_index];
  VideoProbe probe;
  probe.width = stream->codecpar->width;
  probe.height = stream->codecpar->height;
  probe.fps = stream_fps(stream);
  probe.frames = stream->nb_frames;
  if (probe.frames <= 0) {  // Matroska, WebM, raw streams: count the packets (one per frame)
    probe.frames = 0;
    std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
    while (av_read_frame(format.get(), packet.get()) >= 0) {
      if (packet->stream_index == stream_index) ++probe.frames;
      av_packet_unref(packet.get());
    }
  }
  MM_CHECK(probe.frames == 0 || (probe.width > 0 && probe.height > 0), name,
           ": the video stream has no frame size");
  return probe;
}

void decode_video_frames(const std::filesystem::path& path, const std::vector<int64_t>& indices,
                         const std::function<void(size_t k, const at::Tensor& rgb)>& visit) {
  const std::string name = path.string();
  for (size_t k = 0; k < indices.size(); ++k) {
    MM_CHECK(indices[k] >= 0 && (k == 0 || indices[k] >= indices[k - 1]), name,
             ": frame indices must be non-negative and non-decreasing");
  }
  if (indices.empty()) return;
  int stream_index = -1;
  FormatPtr format = open_video(name, &stream_index);
  const AVStream* stream = format->streams[stream_index];
  const AVCodec* codec = avcodec_find_decoder(stream->codecpar->codec_id);
  MM_CHECK(codec, name, ": no decoder for codec ", avcodec_get_name(stream->codecpar->codec_id));
  std::unique_ptr<AVCodecContext, CodecDeleter> decoder(avcodec_alloc_context3(codec));
  MM_CHECK(avcodec_parameters_to_context(decoder.get(), stream->codecpar) >= 0, name, ": bad codec parameters");
  decoder->thread_count = 1;  // the loader decodes several clips in parallel instead
  const int open_rc = avcodec_open2(decoder.get(), codec, nullptr);
  MM_CHECK(open_rc >= 0, name, ": cannot open the ", codec->name, " decoder: ", av_error(open_rc));

  std::unique_ptr<SwsContext, SwsDeleter> sws;
  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  int64_t decoded = 0;  // index of the next decoded frame
  size_t next = 0;      // next entry of indices to visit
  auto receive_frames = [&]() {
    while (next < indices.size()) {
      const int rc = avcodec_receive_frame(decoder.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      MM_CHECK(rc >= 0, name, ": cannot decode frame ", decoded, ": ", av_error(rc));
      if (indices[next] == decoded) {
        at::Tensor rgb = torch::empty({frame->height, frame->width, 3}, torch::kByte);
        to_rgb(sws, frame.get(), rgb.data_ptr<uint8_t>(), name);
        for (; next < indices.size() && indices[next] == decoded; ++next) visit(next, rgb);
      }
      av_frame_unref(frame.get());
      ++decoded;
    }
  };
  while (next < indices.size() && av_read_frame(format.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream_index) {
      const int rc = avcodec_send_packet(decoder.get(), packet.get());
      av_packet_unref(packet.get());
      MM_CHECK(rc >= 0 || rc == AVERROR_INVALIDDATA, name, ": cannot decode packet: ", av_error(rc));
      receive_frames();
    } else {
      av_packet_unref(packet.get());
    }
  }
  if (next < indices.size()) {  // drain the decoder's delayed frames
    avcodec_send_packet(decoder.get(), nullptr);
    receive_frames();
  }
  MM_CHECK(next == indices.size(), name, ": only ", decoded, " frames could be decoded, frame ", indices[next],
           " was needed (truncated or corrupt video?)");
}

}  // namespace mm
