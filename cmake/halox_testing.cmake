# halox_add_mpi_test(NAME <name> TARGET <exe> RANKS <n>... [LABELS <l>...] [TIMEOUT <s>] [ARGS <a>...]
#                    [ENV <VAR=value>...])
# Registers one ctest per rank count, named <name>.np<n>, launched with the configured mpiexec
# (plus the flags and environment this MPI flavour needs to run as root and oversubscribed).
# Rank counts above HALOX_TEST_MAX_RANKS are not registered.
#
# MPICH from Debian (ch4:ucx) busy-polls: with more ranks than cores every collective waits for
# a scheduler time slice (~15 ms each on a 2-core machine), so its default ceiling is 4 ranks;
# Open MPI yields when oversubscribed and runs the full 1-8 range. Raise the ceiling on a machine
# with more cores: -DHALOX_TEST_MAX_RANKS=8.
if(HALOX_MPI_FLAVOUR STREQUAL "mpich")
  set(_halox_default_max_ranks 4)
else()
  set(_halox_default_max_ranks 8)
endif()
set(HALOX_TEST_MAX_RANKS ${_halox_default_max_ranks} CACHE STRING
    "Largest MPI rank count registered as a test")

function(halox_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TARGET;TIMEOUT" "RANKS;LABELS;ARGS;ENV" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  foreach(n IN LISTS T_RANKS)
    if(n GREATER HALOX_TEST_MAX_RANKS)
      continue()
    endif()
    set(test_name ${T_NAME}.np${n})
    add_test(NAME ${test_name}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${HALOX_MPIEXEC_PREFLAGS}
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_TARGET}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${test_name} PROPERTIES
      PROCESSORS ${n} TIMEOUT ${T_TIMEOUT}
      LABELS "mpi;np${n};${T_LABELS}"
      # One OpenMP thread per rank: the ranks already oversubscribe the cores. Then the
      # caller's ENV (e.g. a shorter autotuning budget where the ranks oversubscribe the cores).
      ENVIRONMENT "${HALOX_MPIEXEC_ENV};OMP_NUM_THREADS=1;${T_ENV}")
  endforeach()
endfunction()
