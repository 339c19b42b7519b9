# NVTX ranges: a recording stand-in for a profiler (a library NVTX loads through
# NVTX_INJECTION64_PATH, as Nsight Systems does) sees the training step's ranges.
if(MM_NVTX_INCLUDE_DIR)
  add_library(nvtx_recorder SHARED unit/nvtx_recorder.cpp)
  mm_nvtx_sources(unit/nvtx_recorder.cpp)
endif()
mm_test(test_nvtx_ranges)
if(MM_NVTX_INCLUDE_DIR)
  target_compile_definitions(test_nvtx_ranges PRIVATE "MM_NVTX_RECORDER=\"$<TARGET_FILE:nvtx_recorder>\"")
  add_dependencies(test_nvtx_ranges nvtx_recorder)
endif()
