# Finds LibTorch: Debian's (1.13, CPU) from the default prefix, or a PyTorch 2.x wheel's when
# CMAKE_PREFIX_PATH holds `python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'`.
find_package(Torch REQUIRED)
# Torch's imported targets carry its flags (ABI macro); its headers are third-party.
set_property(TARGET torch APPEND PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${TORCH_INCLUDE_DIRS})

# The C++ standard this LibTorch's headers require: C++17 up to 2.13, C++20 where ATen.h stops
# with an #error below it (2.14). Read off the header rather than the version, and handed on to
# what links jitckpt (jitckpt_torch_standard), installed packages' users included.
find_file(JITCKPT_ATEN_HEADER ATen/ATen.h PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
file(STRINGS "${JITCKPT_ATEN_HEADER}" JITCKPT_ATEN_NEEDS_CXX20 REGEX "C\\+\\+20 or later")
if(JITCKPT_ATEN_NEEDS_CXX20)
  set(CMAKE_CXX_STANDARD 20)
endif()
function(jitckpt_torch_standard target)
  target_compile_features(${target} PUBLIC cxx_std_${CMAKE_CXX_STANDARD})
endfunction()

# CUDA code is built exactly when LibTorch has CUDA.
if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
  set(JITCKPT_CUDA ON)
else()
  set(JITCKPT_CUDA OFF)
endif()
message(STATUS "jitckpt: LibTorch ${Torch_VERSION}, C++${CMAKE_CXX_STANDARD}, CUDA ${JITCKPT_CUDA}")

# Every TorchScript translation unit parses torch/script.h, about 20 s each on a 2-core machine;
# a precompiled header parses it once. jitckpt_torch_pch(target [donor]) gives `target` one of
# its own, or reuses the donor's: GCC takes a header precompiled with the same code-generation
# flags only (-fPIC for libraries, -fPIE for programs). JITCKPT_PCH=OFF compiles without.
option(JITCKPT_PCH "Precompile torch/script.h for the targets that use LibTorch" ON)
function(jitckpt_torch_pch target)
  if(NOT JITCKPT_PCH)
    return()
  endif()
  # GCC also refuses a header precompiled under other macros: one name for every library's
  # export macro instead of <target>_EXPORTS (none is used).
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    set_target_properties(${target} PROPERTIES DEFINE_SYMBOL JITCKPT_BUILDING_LIBRARY)
  endif()
  if(ARGC GREATER 1)
    target_precompile_headers(${target} REUSE_FROM ${ARGV1})
  else()
    target_precompile_headers(${target} PRIVATE <torch/script.h>)
  endif()
endfunction()

# jitckpt_torch_unity(target): the target's sources compile in batches of 8, which instantiate the
# torch headers' templates once per batch instead of once per file: the libraries and the
# GoogleTest programs (a batch is one translation unit, so two files of a program cannot define
# helpers of the same name in their anonymous namespaces).
# -DCMAKE_UNITY_BUILD=OFF (or =ON for every target) overrides it.
function(jitckpt_torch_unity target)
  if(NOT DEFINED CMAKE_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
