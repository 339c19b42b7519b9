// What the FFmpeg-based readers and writers (video_decode, video_probe, video_encode) share:
// error strings, owning handles, opening a file's video stream, its frame rate and frame count,
// and conversion of decoded frames to RGB24. Included only by those .cpp files (it pulls in the
// FFmpeg C headers).
#pragma once
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include <cstdint>
#include <memory>
#include <string>

namespace mm::ffmpeg {

std::string error_string(int code);  // av_strerror's message

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
using CodecPtr = std::unique_ptr<AVCodecContext, CodecDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using SwsPtr = std::unique_ptr<SwsContext, SwsDeleter>;

// Opens `name` (named in errors) and finds its best video stream, whose index goes to
// *stream_index. Throws mm::Error for an unreadable file or one without a video stream.
FormatPtr open_video(const std::string& name, int* stream_index);

// The video packets of the stream in one demux pass (one per frame), without decoding.
int64_t count_packets(const std::string& name);

// The stream's average frame rate (or its base rate), 0 when neither is known.
double stream_fps(const AVStream* stream);

// Converts decoded frames (any pixel format and size) to RGB24 at width x height, honouring each
// frame's colour matrix and range.
class RgbConverter {
 public:
  RgbConverter(int width, int height) : width_(width), height_(height) {}
  // out: width * height * 3 bytes.
  void convert(const AVFrame* frame, uint8_t* out, const std::string& name);

 private:
  int width_, height_;
  SwsPtr sws_;
};

}  // namespace mm::ffmpeg
