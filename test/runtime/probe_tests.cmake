# Probe tests: the counting CPU allocator (test_probe_allocator.cpp), the stage profiler
# (test_profile_*.cpp) and, once the runtime op exists, the memory of a rewritten training step.
include(GoogleTest)
file(GLOB JITCKPT_PROBE_TEST_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/test_probe_*.cpp ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_*.cpp)
add_executable(test_probes ${JITCKPT_PROBE_TEST_SOURCES})
# --no-as-needed: the tests reach the op and Plan class only through their static registration.
target_link_libraries(test_probes PRIVATE -Wl,--no-as-needed jitckpt -Wl,--as-needed GTest::gtest_main)
jitckpt_warnings(test_probes)
gtest_discover_tests(test_probes DISCOVERY_TIMEOUT 120 PROPERTIES LABELS probes)
# The fixture models of the runtime tests (runtime_tests.cmake, included before this file).
if(TARGET jitckpt_runtime_fixtures)
  add_dependencies(test_probes jitckpt_runtime_fixtures)
  target_compile_definitions(test_probes PRIVATE JITCKPT_FIXTURE_DIR="${JITCKPT_RUNTIME_FIXTURE_DIR}")
endif()
