# Refuses a GNU toolchain that links libstdc++ statically into shared libraries (a GCC built without
# a shared libstdc++, as on some CUDA images). Each jitckpt library would then carry its own copy
# of the C++ runtime beside the one LibTorch loads, and a stream or locale crossing them crashes
# (seen as a segfault in the first operator<< of Plan::str). Checked once per build folder.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT DEFINED CACHE{JITCKPT_SHARED_LIBSTDCXX})
  set(_dir ${CMAKE_BINARY_DIR}/CMakeFiles/libstdcxx-check)
  file(WRITE ${_dir}/probe.cpp
       "#include <sstream>\nstd::string jitckpt_probe(int i) { std::ostringstream o; o << i; return o.str(); }\n")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -shared -fPIC -o ${_dir}/probe.so ${_dir}/probe.cpp
                  RESULT_VARIABLE _built OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${CMAKE_OBJDUMP} -p ${_dir}/probe.so OUTPUT_VARIABLE _headers ERROR_QUIET)
  if(_built EQUAL 0 AND CMAKE_OBJDUMP AND NOT _headers MATCHES "NEEDED +libstdc\\+\\+")
    message(FATAL_ERROR
            "${CMAKE_CXX_COMPILER} links libstdc++ statically into shared libraries; jitckpt's "
            "libraries would each carry a copy beside LibTorch's and crash when they exchange C++ "
            "streams. Configure with a compiler that links the shared libstdc++, for example "
            "CXX=/usr/bin/g++ in a fresh build folder.")
  endif()
  set(JITCKPT_SHARED_LIBSTDCXX ON CACHE INTERNAL "the C++ compiler links libstdc++ as a shared library")
endif()
