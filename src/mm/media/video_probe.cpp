// Unlike decode_video: an explicit index list and a per-frame callback instead of one tensor of
// all selected frames, and frames at their own size.
#include <torch/torch.h>

#include <memory>

#include "mm/core/error.h"
#include "mm/media/ffmpeg_common.h"
#include "mm/media/video_probe.h"

namespace mm {
namespace {

using namespace ffmpeg;

// A missing file is named as such (opening it would only say "cannot open").
FormatPtr open_existing_video(const std::string& name, int* stream_index) {
  MM_CHECK(std::filesystem::is_regular_file(name), name, ": no such video file");
  return open_video(name, stream_index);
}

}  // namespace

VideoProbe probe_video(const std::filesystem::path& path) {
  const std::string name = path.string();
  int stream_index = -1;
  FormatPtr format = open_existing_video(name, &stream_index);
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
  FormatPtr format = open_existing_video(name, &stream_index);
  const AVStream* stream = format->streams[stream_index];
  const AVCodec* codec = avcodec_find_decoder(stream->codecpar->codec_id);
  MM_CHECK(codec, name, ": no decoder for codec ", avcodec_get_name(stream->codecpar->codec_id));
  std::unique_ptr<AVCodecContext, CodecDeleter> decoder(avcodec_alloc_context3(codec));
  MM_CHECK(avcodec_parameters_to_context(decoder.get(), stream->codecpar) >= 0, name, ": bad codec parameters");
  decoder->thread_count = 1;  // the loader decodes several clips in parallel instead
  const int open_rc = avcodec_open2(decoder.get(), codec, nullptr);
  MM_CHECK(open_rc >= 0, name, ": cannot open the ", codec->name, " decoder: ", error_string(open_rc));

  std::unique_ptr<RgbConverter> rgb_converter;  // for frames of rgb_size
  std::pair<int, int> rgb_size{0, 0};
  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  int64_t decoded = 0;  // index of the next decoded frame
  size_t next = 0;      // next entry of indices to visit
  auto receive_frames = [&]() {
    while (next < indices.size()) {
      const int rc = avcodec_receive_frame(decoder.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      MM_CHECK(rc >= 0, name, ": cannot decode frame ", decoded, ": ", error_string(rc));
      if (indices[next] == decoded) {
        at::Tensor rgb = torch::empty({frame->height, frame->width, 3}, torch::kByte);
        if (!rgb_converter || rgb_size != std::pair{frame->width, frame->height}) {
          rgb_size = {frame->width, frame->height};
          rgb_converter = std::make_unique<RgbConverter>(frame->width, frame->height);
        }
        rgb_converter->convert(frame.get(), rgb.data_ptr<uint8_t>(), name);
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
      MM_CHECK(rc >= 0 || rc == AVERROR_INVALIDDATA, name, ": cannot decode packet: ", error_string(rc));
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
