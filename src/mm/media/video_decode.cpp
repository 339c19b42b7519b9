// FFmpeg decoding. Two sequential passes over the file: the first only demuxes and counts the
// video packets (one per frame), so the frame selection is known before any pixel is decoded;
// the second decodes and converts just the selected frames.
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "mm/core/error.h"
#include "mm/media/ffmpeg_common.h"
#include "mm/media/video_decode.h"

namespace mm {

using namespace ffmpeg;

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
  MM_CHECK(open_rc >= 0, name, ": cannot open the ", codec->name, " decoder: ", error_string(open_rc));
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
      MM_CHECK(rc >= 0, name, ": cannot decode frame ", decoded, ": ", error_string(rc));
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
      MM_CHECK(rc >= 0 || rc == AVERROR_INVALIDDATA, name, ": cannot decode packet: ", error_string(rc));
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
