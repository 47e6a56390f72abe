# Finds LibTorch: Debian's (1.13, CPU) from the default prefix, or a PyTorch 2.x wheel's when
# CMAKE_PREFIX_PATH holds `python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'`.
find_package(Torch REQUIRED)
# Torch's imported targets carry its flags (ABI macro); its headers are third-party.
set_property(TARGET torch APPEND PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${TORCH_INCLUDE_DIRS})

# CUDA code is built exactly when LibTorch has CUDA.
if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
  set(JITCKPT_CUDA ON)
else()
  set(JITCKPT_CUDA OFF)
endif()
message(STATUS "jitckpt: LibTorch ${Torch_VERSION}, CUDA ${JITCKPT_CUDA}")

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
# torch headers' templates once per batch instead of once per file (the libraries, whose files are
# many and small; test files, which define helpers of the same names, each compile alone).
# -DCMAKE_UNITY_BUILD=OFF (or =ON for every target) overrides it.
function(jitckpt_torch_unity target)
  if(NOT DEFINED CMAKE_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
