# Text-to-video data: buckets, frame sampling, crops against DiffSynth-Studio's (torchvision), the
# bucketed batch sampler and the dataset over videos and images made at test time with ffmpeg.
mm_oracle(text_video_crop)
mm_test(test_text_video_dataset ORACLES text_video_crop)
