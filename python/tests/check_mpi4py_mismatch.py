"""Importing halox next to an mpi4py that runs on another MPI library must stop with an
ImportError naming both MPIs and the fix, before the extension loads its own MPI (two MPI
libraries in one process crash later, far from the cause). Usage: check_mpi4py_mismatch.py
<flavour halox was built for>."""

import sys

import mpi4py

mpi4py.rc.initialize = False  # load mpi4py's MPI, as a program would, without starting it
from mpi4py import MPI  # noqa: E402,F401

try:
    import halox  # noqa: F401
except ImportError as e:
    print(e)
    assert f"built for {sys.argv[1]}" in str(e) and "comm_world" in str(e), e
else:
    sys.exit("import halox next to an mpi4py on another MPI did not fail")
