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
# The system's libstdc++ first in the symbol search order, before libtorch. The torch 2.11 wheels
# (built with a newer GCC against an old libstdc++) carry and export their own copy of
# std::filesystem, whose remove_all calls recursive_directory_iterator::__erase, a GCC 13 function
# they leave weak and undefined: with an older libstdc++ (Debian 12's GCC 12) every remove_all in
# the process, ours and torch's, jumped to address 0. The order of a program's DT_NEEDED entries
# is the search order, and link options come before the libraries on the link line.
target_link_options(mm_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
if(EXISTS "${MM_TORCH_DIR}/include/gloo")
  target_compile_definitions(mm_torch INTERFACE USE_C10D_GLOO)
endif()
if(MM_TORCH_CUDA)
  target_compile_definitions(mm_torch INTERFACE USE_C10D_NCCL MM_TORCH_CUDA)
endif()

# The CUDA and NCCL headers, for the few files that call NCCL directly (dist/nccl_group.cpp):
# they are compiled outside the shared precompiled header, so nothing else sees these headers.
# They come from the CUDA torch wheel's own dependencies (nvidia/*/include; requirements.txt adds
# nvidia-cuda-crt and nvidia-cuda-cccl for the compiler headers cuda_runtime.h includes) or from a
# CUDA toolkit. Without them (a CPU torch) those files build to clear errors.
set(MM_CUDA_INCLUDE_DIRS "")
if(MM_TORCH_CUDA)
  execute_process(
    COMMAND "${MM_TORCH_PYTHON}" -c
      "import os, nvidia; print(';'.join(os.path.join(p, d, 'include') for p in nvidia.__path__ for d in sorted(os.listdir(p))))"
    OUTPUT_VARIABLE _mm_nvidia_includes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(_mm_cuda_found ON)
  foreach(_mm_header cuda_runtime_api.h crt/host_config.h nv/target nccl.h)
    string(MAKE_C_IDENTIFIER "MM_HEADER_DIR_${_mm_header}" _mm_var)
    find_path(${_mm_var} "${_mm_header}" HINTS ${_mm_nvidia_includes} /usr/local/cuda/include PATH_SUFFIXES "" cccl)
    if(${_mm_var})
      list(APPEND MM_CUDA_INCLUDE_DIRS "${${_mm_var}}")
    else()
      set(_mm_cuda_found OFF)
      message(WARNING "${_mm_header} not found (pip: the nvidia-* wheels of tests/reference/requirements.txt): "
        "this build cannot make NCCL groups, so it trains on one GPU at most")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES MM_CUDA_INCLUDE_DIRS)
  if(NOT _mm_cuda_found)
    set(MM_CUDA_INCLUDE_DIRS "")
  endif()
endif()

# NVTX's header-only nvtx3 (the torch wheel's nvidia-nvtx dependency, or a CUDA toolkit), for
# core/nvtx_range.cpp: it needs no CUDA runtime headers and links nothing (it dlopens a profiler).
find_path(MM_NVTX_INCLUDE_DIR nvtx3/nvToolsExt.h HINTS ${_mm_nvidia_includes} /usr/local/cuda/include)

# mm_nvtx_sources(FILE...): compiles FILE with NVTX (MM_HAVE_NVTX) when the headers were found.
function(mm_nvtx_sources)
  if(NOT MM_NVTX_INCLUDE_DIR)
    return()
  endif()
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_DEFINITIONS MM_HAVE_NVTX SKIP_PRECOMPILE_HEADERS ON
    COMPILE_OPTIONS "-isystem;${MM_NVTX_INCLUDE_DIR}")
endfunction()

# mm_nccl_sources(FILE...): compiles FILE with NCCL (MM_HAVE_NCCL and the headers above) when the
# build has them. Source properties are per directory: call it where the target is made.
function(mm_nccl_sources)
  if(NOT MM_CUDA_INCLUDE_DIRS)
    return()
  endif()
  set(_mm_flags "")
  foreach(_mm_dir IN LISTS MM_CUDA_INCLUDE_DIRS)
    list(APPEND _mm_flags "-isystem" "${_mm_dir}")
  endforeach()
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_DEFINITIONS MM_HAVE_NCCL SKIP_PRECOMPILE_HEADERS ON
    COMPILE_OPTIONS "${_mm_flags}")
endfunction()
