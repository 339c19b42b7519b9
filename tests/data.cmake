# Data: image / video decoding and the Qwen2-VL processor against transformers 5.17; video
# encoding (read back by ffprobe and our decoder).
mm_oracle(qwen2_vl_processor)
mm_test(test_image_decode ORACLES qwen2_vl_processor)
mm_test(test_video_decode ORACLES qwen2_vl_processor)
mm_test(test_qwen2_vl_processor ORACLES qwen2_vl_processor)
mm_test(test_video_encode)
