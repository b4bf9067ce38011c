# The Python package (pybind11 extension halox._halox + the pure-Python halox and halox.torch).
#
# The extension brings its own communicators (halox.Comm) and initialises MPI itself, so it
# needs no mpi4py and is built for every MPI. mpi4py is an optional second path: when the
# interpreter's mpi4py runs on this build's MPI (Debian 12's python3-mpi4py is built against
# Open MPI), the tests run the suites on mpi4py communicators as well (HALOX_MPI4PY_MATCHES).
#
# HALOX_PYTHON           interpreter to build for (default /usr/bin/python3 when present, so a
#                        pyenv or venv shim on PATH does not hide Debian's packages)
# HALOX_ENABLE_PYTHON    ON by default when pybind11 and the Python headers are found; forcing
#                        it ON without them is an error naming what is missing
# HALOX_PYTHON_INSTALL_DIR  where `cmake --install` puts the package, relative to the prefix

if(EXISTS /usr/bin/python3)
  set(_halox_default_python /usr/bin/python3)
else()
  find_program(_halox_default_python NAMES python3 python)
endif()
set(HALOX_PYTHON "${_halox_default_python}" CACHE FILEPATH
    "Python interpreter the halox Python package is built for")

set(_halox_py_missing "")
set(Python3_EXECUTABLE ${HALOX_PYTHON})
find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
if(NOT Python3_Development.Module_FOUND)
  list(APPEND _halox_py_missing "the Python headers for ${HALOX_PYTHON} (Debian: python3-dev)")
endif()
find_package(pybind11 2.6 CONFIG QUIET)
if(NOT pybind11_FOUND)
  list(APPEND _halox_py_missing "pybind11 (Debian: pybind11-dev python3-pybind11)")
endif()

# Which MPI does mpi4py run on, if there is one? MPI.Get_library_version() names it.
set(HALOX_MPI4PY_MATCHES OFF)
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${HALOX_PYTHON} -c
                          "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())"
                  RESULT_VARIABLE _halox_mpi4py_rc OUTPUT_VARIABLE _halox_mpi4py_version
                  ERROR_QUIET)
  if(_halox_mpi4py_rc EQUAL 0 AND
     ((_halox_mpi4py_version MATCHES "Open MPI" AND HALOX_MPI_FLAVOUR STREQUAL "openmpi") OR
      (_halox_mpi4py_version MATCHES "MPICH" AND HALOX_MPI_FLAVOUR STREQUAL "mpich")))
    set(HALOX_MPI4PY_MATCHES ON)
  endif()
else()
  list(APPEND _halox_py_missing "a Python 3 interpreter (set HALOX_PYTHON)")
endif()

set(_halox_python_default OFF)
if(NOT _halox_py_missing)
  set(_halox_python_default ON)
endif()
option(HALOX_ENABLE_PYTHON "Build the Python package (pybind11 extension, halox.torch)"
       ${_halox_python_default})
if(HALOX_ENABLE_PYTHON AND _halox_py_missing)
  list(JOIN _halox_py_missing "; " _halox_py_missing_text)
  message(FATAL_ERROR "HALOX_ENABLE_PYTHON=ON needs ${_halox_py_missing_text}. Install what "
                      "is missing or configure with -DHALOX_ENABLE_PYTHON=OFF.")
elseif(NOT HALOX_ENABLE_PYTHON AND _halox_py_missing)
  list(JOIN _halox_py_missing "; " _halox_py_missing_text)
  message(STATUS "halox: Python package not built; it needs ${_halox_py_missing_text}")
endif()

if(HALOX_ENABLE_PYTHON)
  set(HALOX_PYTHON_INSTALL_DIR
      "${CMAKE_INSTALL_LIBDIR}/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/site-packages"
      CACHE STRING "Folder (relative to the install prefix, or absolute) for the Python package")
endif()
