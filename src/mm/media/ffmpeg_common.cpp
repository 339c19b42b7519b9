#include "mm/media/ffmpeg_common.h"

extern "C" {
#include <libavutil/pixdesc.h>
}

#include "mm/core/error.h"

namespace mm::ffmpeg {

std::string error_string(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = "";
  av_strerror(code, buf, sizeof buf);
  return buf;
}

FormatPtr open_video(const std::string& name, int* stream_index) {
  AVFormatContext* raw = nullptr;
  const int rc = avformat_open_input(&raw, name.c_str(), nullptr, nullptr);
  MM_CHECK(rc >= 0, name, ": cannot open as a video: ", error_string(rc));
  FormatPtr format(raw);
  const int info_rc = avformat_find_stream_info(format.get(), nullptr);
  MM_CHECK(info_rc >= 0, name, ": cannot read the video's stream info: ", error_string(info_rc));
  *stream_index = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  MM_CHECK(*stream_index >= 0, name, ": has no video stream (not a video file)");
  return format;
}

int64_t count_packets(const std::string& name) {
  int stream_index = -1;
  FormatPtr format = open_video(name, &stream_index);
  PacketPtr packet(av_packet_alloc());
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

void RgbConverter::convert(const AVFrame* frame, uint8_t* out, const std::string& name) {
  sws_.reset(sws_getCachedContext(sws_.release(), frame->width, frame->height,
                                  static_cast<AVPixelFormat>(frame->format), width_, height_, AV_PIX_FMT_RGB24,
                                  SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP, nullptr,
                                  nullptr, nullptr));
  MM_CHECK(sws_, name, ": cannot convert pixel format ",
           av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format)), " to RGB");
  const int colorspace = frame->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : frame->colorspace;
  const int src_range = frame->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
  int* inv_table = nullptr;
  int* table = nullptr;
  int src_range_now = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
  if (sws_getColorspaceDetails(sws_.get(), &inv_table, &src_range_now, &table, &dst_range, &brightness, &contrast,
                               &saturation) >= 0) {
    sws_setColorspaceDetails(sws_.get(), sws_getCoefficients(colorspace), src_range, table, 1, brightness, contrast,
                             saturation);
  }
  uint8_t* dst[4] = {out, nullptr, nullptr, nullptr};
  int dst_stride[4] = {3 * width_, 0, 0, 0};
  sws_scale(sws_.get(), frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
}

}  // namespace mm::ffmpeg
