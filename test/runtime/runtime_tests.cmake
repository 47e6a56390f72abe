# Runtime tests (Plan, jitckpt::chain op, executor, rewrite): GoogleTest on the CPU, on small
# scripted models that test/fixtures/make_models.py makes at build time.
include(GoogleTest)
if(EXISTS /usr/bin/python3)
  set(JITCKPT_FIXTURE_PYTHON /usr/bin/python3)
else()
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  set(JITCKPT_FIXTURE_PYTHON ${Python3_EXECUTABLE})
endif()
set(JITCKPT_RUNTIME_FIXTURE_DIR ${CMAKE_CURRENT_BINARY_DIR}/fixtures)
set(JITCKPT_RUNTIME_FIXTURES tiny_resnet dropout_mlp shared_parameter inplace_boundary resnet18)
list(TRANSFORM JITCKPT_RUNTIME_FIXTURES PREPEND ${JITCKPT_RUNTIME_FIXTURE_DIR}/ OUTPUT_VARIABLE _fixture_files)
list(TRANSFORM _fixture_files APPEND .pt)
add_custom_command(
  OUTPUT ${_fixture_files}
  COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1
          ${JITCKPT_FIXTURE_PYTHON} ${PROJECT_SOURCE_DIR}/test/fixtures/make_models.py ${JITCKPT_RUNTIME_FIXTURE_DIR}
  DEPENDS ${PROJECT_SOURCE_DIR}/test/fixtures/make_models.py
  COMMENT "Scripting the runtime test models (test/fixtures/make_models.py)")
add_custom_target(jitckpt_runtime_fixtures ALL DEPENDS ${_fixture_files})

file(GLOB JITCKPT_RUNTIME_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_runtime_*.cpp)
add_executable(test_runtime ${JITCKPT_RUNTIME_TEST_SOURCES})
# --no-as-needed: the tests reach the op and the Plan class only through their static registration.
target_link_libraries(test_runtime PRIVATE -Wl,--no-as-needed jitckpt -Wl,--as-needed GTest::gtest_main)
target_compile_definitions(test_runtime PRIVATE JITCKPT_RUNTIME_FIXTURE_DIR="${JITCKPT_RUNTIME_FIXTURE_DIR}")
add_dependencies(test_runtime jitckpt_runtime_fixtures)
jitckpt_warnings(test_runtime)
gtest_discover_tests(test_runtime DISCOVERY_TIMEOUT 120 PROPERTIES LABELS runtime)
