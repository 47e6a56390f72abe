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
