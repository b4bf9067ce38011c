# halox_add_mpi_test(NAME <name> TARGET <exe> RANKS <n>... [LABELS <l>...] [TIMEOUT <s>] [ARGS <a>...])
# Registers one ctest per rank count, named <name>.np<n>, launched with the configured mpiexec
# (plus the flags and environment this MPI flavour needs to run as root and oversubscribed).
function(halox_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TARGET;TIMEOUT" "RANKS;LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  foreach(n IN LISTS T_RANKS)
    set(test_name ${T_NAME}.np${n})
    add_test(NAME ${test_name}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${HALOX_MPIEXEC_PREFLAGS}
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_TARGET}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${test_name} PROPERTIES
      PROCESSORS ${n} TIMEOUT ${T_TIMEOUT}
      LABELS "mpi;np${n};${T_LABELS}"
      ENVIRONMENT "${HALOX_MPIEXEC_ENV}")
  endforeach()
endfunction()
