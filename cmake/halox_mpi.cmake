# Chooses the MPI implementation. Debian installs MPICH and Open MPI side by side with suffixed
# wrappers (mpicc.mpich, mpicc.openmpi); HALOX_MPI picks one explicitly, `auto` takes whatever
# FindMPI finds first (the system default chosen by update-alternatives).
set(HALOX_MPI "auto" CACHE STRING "MPI implementation: auto, mpich or openmpi")
set_property(CACHE HALOX_MPI PROPERTY STRINGS auto mpich openmpi)

if(HALOX_MPI STREQUAL "mpich" OR HALOX_MPI STREQUAL "openmpi")
  find_program(HALOX_MPICC mpicc.${HALOX_MPI} REQUIRED)
  find_program(HALOX_MPICXX mpicxx.${HALOX_MPI} REQUIRED)
  find_program(HALOX_MPIEXEC mpiexec.${HALOX_MPI} REQUIRED)
  set(MPI_C_COMPILER ${HALOX_MPICC} CACHE FILEPATH "" FORCE)
  set(MPI_CXX_COMPILER ${HALOX_MPICXX} CACHE FILEPATH "" FORCE)
  set(MPIEXEC_EXECUTABLE ${HALOX_MPIEXEC} CACHE FILEPATH "" FORCE)
elseif(NOT HALOX_MPI STREQUAL "auto")
  message(FATAL_ERROR "HALOX_MPI='${HALOX_MPI}' is not known; use auto, mpich or openmpi")
endif()

find_package(MPI REQUIRED COMPONENTS C)

# Which flavour did we get? The launcher says it.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _halox_mpiexec_version
                ERROR_VARIABLE _halox_mpiexec_version)
if(_halox_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(HALOX_MPI_FLAVOUR openmpi)
elseif(_halox_mpiexec_version MATCHES "HYDRA|MPICH")
  set(HALOX_MPI_FLAVOUR mpich)
else()
  set(HALOX_MPI_FLAVOUR other)
endif()

# Flags every test launch needs: Open MPI refuses root and more ranks than cores unless told.
set(HALOX_MPIEXEC_PREFLAGS "")
set(HALOX_MPIEXEC_ENV "")
if(HALOX_MPI_FLAVOUR STREQUAL "openmpi")
  set(HALOX_MPIEXEC_PREFLAGS --oversubscribe)
  set(HALOX_MPIEXEC_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                        OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none)
endif()
