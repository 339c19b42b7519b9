# Finds libtorch inside a Python torch wheel (CPU or CUDA build) and defines mm::torch.
# We do not use the wheel's TorchConfig.cmake: on CUDA wheels it demands a matching CUDA
# toolkit at configure time, which we never compile against (we only call ATen).
execute_process(
  COMMAND "${MM_TORCH_PYTHON}" -c
    "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
  OUTPUT_VARIABLE _mm_torch_out RESULT_VARIABLE _mm_torch_rc ERROR_VARIABLE _mm_torch_err
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _mm_torch_rc EQUAL 0)
  message(FATAL_ERROR "cannot import torch with MM_TORCH_PYTHON=${MM_TORCH_PYTHON}: ${_mm_torch_err}")
endif()
string(REPLACE "\n" ";" _mm_torch_out "${_mm_torch_out}")
list(GET _mm_torch_out 0 MM_TORCH_DIR)
list(GET _mm_torch_out 1 MM_TORCH_CXX11_ABI)
list(GET _mm_torch_out 2 MM_TORCH_VERSION)
message(STATUS "libtorch ${MM_TORCH_VERSION} from ${MM_TORCH_DIR}")

add_library(mm_torch INTERFACE)
add_library(mm::torch ALIAS mm_torch)
target_include_directories(mm_torch SYSTEM INTERFACE
  "${MM_TORCH_DIR}/include" "${MM_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(mm_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${MM_TORCH_CXX11_ABI})
set(_mm_torch_libs "${MM_TORCH_DIR}/lib/libtorch.so" "${MM_TORCH_DIR}/lib/libtorch_cpu.so"
  "${MM_TORCH_DIR}/lib/libc10.so")
set(MM_TORCH_CUDA OFF)
if(EXISTS "${MM_TORCH_DIR}/lib/libtorch_cuda.so")
  set(MM_TORCH_CUDA ON)
  # Nothing of ours references CUDA symbols, so the linker would drop libtorch_cuda and
  # with it the CUDA backend registration: keep it.
  list(APPEND _mm_torch_libs "-Wl,--no-as-needed" "${MM_TORCH_DIR}/lib/libtorch_cuda.so"
    "${MM_TORCH_DIR}/lib/libc10_cuda.so" "-Wl,--as-needed")
endif()
target_link_libraries(mm_torch INTERFACE ${_mm_torch_libs})
target_link_options(mm_torch INTERFACE "-Wl,-rpath,${MM_TORCH_DIR}/lib")
if(EXISTS "${MM_TORCH_DIR}/include/gloo")
  target_compile_definitions(mm_torch INTERFACE USE_C10D_GLOO)
endif()
if(MM_TORCH_CUDA)
  target_compile_definitions(mm_torch INTERFACE USE_C10D_NCCL MM_TORCH_CUDA)
endif()
