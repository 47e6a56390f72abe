# One library per folder, linked as a DAG: solver <- runtime <- passes <- planner <- bindings, tools.
# A library's headers are reached only through an include root of its own,
# ${CMAKE_BINARY_DIR}/include-roots/<folder>/<folder> (a link to the source folder), which the
# library exports to what links it. So `#include "passes/..."` in runtime/ or solver/ finds no
# header and fails to build: the direction is enforced by the build, not by review.
function(jitckpt_include_root target folder)
  set(root ${CMAKE_BINARY_DIR}/include-roots/${folder})
  if(NOT EXISTS ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${root}>)
  else()
    # Installed, the headers a public header needs live in include/jitckpt/detail/<folder>/.
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>
                                                $<INSTALL_INTERFACE:include/jitckpt/detail>)
  endif()
endfunction()
