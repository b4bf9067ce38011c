# Checks that are not C++ tests. Included by tests/CMakeLists.txt.

# `format`: every tracked C++ source matches .clang-format. Skipped (exit 77) when clang-format
# is not installed, so a machine without it still gets a clean ctest run.
find_program(HALOX_CLANG_FORMAT NAMES clang-format clang-format-19 clang-format-18 clang-format-17
                                      clang-format-16 clang-format-15 clang-format-14
             DOC "clang-format used by the format test")
if(HALOX_CLANG_FORMAT)
  set(_halox_clang_format ${HALOX_CLANG_FORMAT})
else()
  set(_halox_clang_format clang-format)
endif()
add_test(NAME format
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check-format.sh ${PROJECT_SOURCE_DIR}
                 ${_halox_clang_format})
set_tests_properties(format PROPERTIES LABELS lint SKIP_RETURN_CODE 77 TIMEOUT 120)

# `installed_headers`: nothing under include/halox (installed as is) includes a CUDA or NCCL
# header, so consumers compile against a CUDA-enabled install without the CUDA toolkit.
add_test(NAME installed_headers
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check-installed-headers.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(installed_headers PROPERTIES LABELS lint TIMEOUT 60)
# `layering`: no lower layer (common < descriptors and planners < executors < plans < operators)
# includes a higher one; the operators use the public API only. See tests/lint/layering.cmake.
add_test(NAME layering
         COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/lint/layering.cmake)
set_tests_properties(layering PROPERTIES LABELS lint TIMEOUT 60)
