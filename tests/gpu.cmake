# The GPU check program (tests/gpu/README.md): compiled in every build so that it cannot rot; run by
# `./mm gpu-check` on a machine with a CUDA GPU (it registers no ctest: CI has no GPU).
add_executable(gpu_check gpu/gpu_check.cpp gpu/host_sync_counter.cpp)
# The sync counter switches torch's sync debug mode, whose header needs the CUDA headers.
mm_nccl_sources(gpu/host_sync_counter.cpp)
target_link_libraries(gpu_check PRIVATE mmtrain_lib)
target_include_directories(gpu_check PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
target_precompile_headers(gpu_check REUSE_FROM mmtrain_lib)
# Its dry run, CPU against CPU: the program itself keeps working where no GPU is.
add_test(NAME GpuCheck.DryRunOnTheCpu COMMAND gpu_check "${PROJECT_SOURCE_DIR}" --device cpu)
set_tests_properties(GpuCheck.DryRunOnTheCpu PROPERTIES TIMEOUT 300)
# Its source list for the GPU machine holds every source its includes reach.
mm_test(test_gpu_check_sources)
