# Layering check: a lower layer must not include a higher one. Run as
#   cmake -DSOURCE_DIR=<repo> -P tests/lint/layering.cmake
# Layers, lowest first (docs/architecture.md; the "Layout" section of README.md):
#   words     include/halox/{box,dtype,error,backend,distribution}.hpp
#                                                the public words every layer uses (boxes, element
#                                                types, the error type, backend names, part
#                                                arithmetic): standard headers and each other only
#   common    src/common/**                      shared helpers below everything else
#   model     src/model/**                       the vocabulary: descriptors, grids, distributions,
#                                                element types, errors, topology
#   plan      include/halox/detail/*.hpp, src/plan/**
#                                                pure planners and the schedule (no MPI in src/plan)
#   exec      src/exec/**                        executors, the context's state and memory
#   tune      src/tune/**                        backend selection: the race, the cache and the
#                                                tuned executor (re-check and watch)
#   api       src/api/**                         contexts, the plan engine and the public plans
#   ops       src/ops/**, include/halox/ops/**   operators: public <halox/...> headers, ops/
#                                                internals and src/common (the shared vocabulary:
#                                                strided regions, element types, settings), in
#                                                three layers of their own, lowest first:
#     kernels   src/ops/kernels/**               serial loops, im2col and GEMM
#     providers src/ops/providers/**             the compute-provider seam, the shared scratch,
#                                                reference/, onednn/, cudnn/
#     dist      src/ops/dist/**                  the distributed operators and the memory budget
# Every .cpp/.hpp/.cu/.cuh file under src/ must sit in one of these folders (or src/tools, the
# executables, which may include everything). Each rule is layer@files@regex of the include
# paths those files must not use.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "layering.cmake: pass -DSOURCE_DIR=<halox source tree>")
endif()

set(_higher_than_plan "api/|exec/|tune/|ops/|halox/ops/")
# The public words include nothing of halox but each other: no internal header, no other public
# header (those are listed from include/halox, so a new header is covered at once).
file(GLOB _public_headers RELATIVE "${SOURCE_DIR}/include/halox" "${SOURCE_DIR}/include/halox/*.hpp")
list(REMOVE_ITEM _public_headers box.hpp dtype.hpp error.hpp backend.hpp distribution.hpp)
string(REPLACE ";" "|" _public_headers "${_public_headers}")
string(REPLACE "." "\\." _public_headers "${_public_headers}")
set(_above_words "^(common/|model/|plan/|${_higher_than_plan}|halox/(detail/|${_public_headers}))")
set(_rules
  "common@src/common/*@^(model/|${_higher_than_plan}|plan/)"
  "model@src/model/*@^(${_higher_than_plan}|plan/)"
  "plan@src/plan/*@^(${_higher_than_plan}|mpi\\.h$)"
  "plan@include/halox/detail/*.hpp@^(${_higher_than_plan}|model/)"
  "words@include/halox/box.hpp@${_above_words}"
  "words@include/halox/dtype.hpp@${_above_words}"
  "words@include/halox/error.hpp@${_above_words}"
  "words@include/halox/backend.hpp@${_above_words}"
  "words@include/halox/distribution.hpp@${_above_words}"
  "exec@src/exec/*@^(api/|tune/|ops/|halox/ops/)"
  # The tuner drives executors through exec/executor.hpp and never a backend's own headers.
  "tune@src/tune/*@^(api/|ops/|halox/ops/|exec/(cuda|nccl|ucx|cma|mpi|cpu)/)"
  # The API drives executors through the exec layer's own headers, never a backend folder's.
  "api@src/api/*@^(ops/|halox/ops/|exec/(cuda|nccl|ucx|cma|mpi|cpu)/)"
  "ops@src/ops/*@^(api/|model/|exec/|plan/|tune/)"
  "ops@include/halox/ops/*@^(api/|model/|exec/|plan/|tune/|common/)"
  "kernels@src/ops/kernels/*@^(ops/providers/|ops/dist/|halox/ops/(dist_|distributed|memory_budget))"
  "providers@src/ops/providers/*@^(ops/dist/|halox/ops/(dist_|distributed|memory_budget))")

# Every source file of src/ belongs to a layer folder.
file(GLOB_RECURSE _src_files LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/src/*")
foreach(f IN LISTS _src_files)
  if(f MATCHES "\\.(h|hpp|cpp|cu|cuh)$" AND
     NOT f MATCHES "^src/(common|model|plan|exec|tune|api|ops|tools)/")
    string(APPEND _unlayered "\n  ${f}")
  endif()
endforeach()

set(_violations "")
# The operators' sources sit in their layer folders, none at the top of src/ops.
foreach(f IN LISTS _src_files)
  if(f MATCHES "^src/ops/[^/]+\\.(h|hpp|cpp|cu|cuh)$")
    string(APPEND _unlayered "\n  ${f}")
  endif()
endforeach()
if(_unlayered)
  string(APPEND _violations "${_unlayered} (in no layer folder: move it into one, see the list above)")
endif()
set(_checked 0)
foreach(rule IN LISTS _rules)
  # layer@glob@forbidden-include-regex ('@' because the regex holds '|' and ';' splits lists)
  string(REGEX MATCH "^([^@]*)@([^@]*)@(.*)$" _ "${rule}")
  set(_layer "${CMAKE_MATCH_1}")
  set(_glob "${CMAKE_MATCH_2}")
  set(_forbidden "${CMAKE_MATCH_3}")
  file(GLOB_RECURSE _files LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/${_glob}")
  foreach(f IN LISTS _files)
    if(NOT f MATCHES "\\.(h|hpp|cpp|cu|cuh)$")
      continue()
    endif()
    math(EXPR _checked "${_checked} + 1")
    file(STRINGS "${SOURCE_DIR}/${f}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]*)[>\"].*$" "\\1" _inc "${line}")
      if(_inc MATCHES "${_forbidden}")
        string(APPEND _violations "\n  ${f} (layer ${_layer}) includes \"${_inc}\"")
      endif()
    endforeach()
  endforeach()
endforeach()

# The environment is read in one place: src/common/environment.cpp (README "Environment variables").
file(GLOB_RECURSE _all_src LIST_DIRECTORIES false RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/src/*"
     "${SOURCE_DIR}/include/*")
foreach(f IN LISTS _all_src)
  if(NOT f MATCHES "\\.(h|hpp|cpp|cu|cuh)$" OR f STREQUAL "src/common/environment.cpp")
    continue()
  endif()
  file(STRINGS "${SOURCE_DIR}/${f}" _reads REGEX "getenv\\(\"HALOX_")
  foreach(line IN LISTS _reads)
    string(STRIP "${line}" line)
    string(APPEND _violations "\n  ${f} reads the environment itself: ${line} (add the variable to "
           "src/common/environment.cpp and read it through common/environment.hpp)")
  endforeach()
endforeach()

if(_violations)
  message(FATAL_ERROR "layering: a lower layer includes a higher one, or a file reads the "
                      "environment outside the settings module:${_violations}\n"
                      "Move what the lower layer needs down (src/common, src/plan or a public "
                      "<halox/...> header), or the code up; see tests/lint/layering.cmake for the "
                      "layers.")
endif()
message(STATUS "layering: ${_checked} files checked, no layer includes a higher one; "
               "only src/common/environment.cpp reads HALOX_* variables")
