# cmake --install <build> [--prefix DIR]: the C++ package (component "cpp", the default).
#   lib/        libjitckpt, libjitckpt_passes, libjitckpt_runtime, libjitckpt_solver (each finds
#               the others beside it)
#   include/    jitckpt/jitckpt.h, and the headers it includes in jitckpt/detail/<folder>/
#   bin/        the jitckpt command line
#   lib/cmake/jitckpt/  jitckptConfig.cmake: find_package(jitckpt), then link jitckpt::jitckpt
# The Python package is the component "python" (bindings/CMakeLists.txt; pip runs it).
include(CMakePackageConfigHelpers)

set_target_properties(jitckpt_planner PROPERTIES EXPORT_NAME jitckpt)
set_target_properties(jitckpt_passes PROPERTIES EXPORT_NAME passes)
set_target_properties(jitckpt_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(jitckpt_solver PROPERTIES EXPORT_NAME solver)
set_target_properties(jitckpt_planner jitckpt_passes jitckpt_runtime jitckpt_solver
                      PROPERTIES INSTALL_RPATH "$ORIGIN")

install(TARGETS jitckpt_planner jitckpt_passes jitckpt_runtime jitckpt_solver EXPORT jitckptTargets
        LIBRARY DESTINATION lib COMPONENT cpp)
install(FILES include/jitckpt/jitckpt.h DESTINATION include/jitckpt COMPONENT cpp)
foreach(folder solver runtime passes planner)
  file(GLOB headers ${PROJECT_SOURCE_DIR}/${folder}/*.h)
  install(FILES ${headers} DESTINATION include/jitckpt/detail/${folder} COMPONENT cpp)
endforeach()
if(TARGET jitckpt-cli)
  set_target_properties(jitckpt-cli PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
  install(TARGETS jitckpt-cli RUNTIME DESTINATION bin COMPONENT cpp)
endif()

install(EXPORT jitckptTargets NAMESPACE jitckpt:: DESTINATION lib/cmake/jitckpt COMPONENT cpp)
configure_package_config_file(cmake/jitckptConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/jitckptConfig.cmake
                              INSTALL_DESTINATION lib/cmake/jitckpt)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/jitckptConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/jitckptConfig.cmake ${CMAKE_BINARY_DIR}/jitckptConfigVersion.cmake
        DESTINATION lib/cmake/jitckpt COMPONENT cpp)
