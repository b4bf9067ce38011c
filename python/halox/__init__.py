"""halox: halo exchange and redistribution of distributed N-d tensors over MPI.

Describe a distributed tensor once (:class:`ProcessGrid`, :class:`DimOptions`,
:class:`TensorDesc`), plan its communication once (:class:`HaloPlan`,
:class:`RedistributePlan`, :class:`BoxGatherPlan`), then execute the plan many times on NumPy
arrays or torch tensors, which halox reads and writes in place (never copied).

Communicators are mpi4py objects (``mpi4py.MPI.COMM_WORLD`` ...); importing halox imports
``mpi4py.MPI``, which initialises MPI. Every halox failure raises :class:`Error`, the same on
every rank for collective calls.

``halox.torch`` adds autograd functions and spatially parallel layers for PyTorch.
"""

# mpi4py must initialise MPI (and load the MPI library) before the extension, which is linked
# against the same MPI, makes any MPI call.
from mpi4py import MPI as _MPI  # noqa: F401

from ._halox import (  # noqa: F401
    Backend,
    BoundaryFill,
    Box,
    BoxGatherPlan,
    Context,
    DimOptions,
    Distribution,
    Error,
    HAS_CUDA,
    HaloPlan,
    MemoryKind,
    MemorySpace,
    ProcessGrid,
    RedistributePlan,
    ReduceOp,
    TensorDesc,
    backend_from_string,
    build_info,
    choose_grid,
    device_backends,
    dtype,
    gather,
    host_backends,
    mpi_library_version,
    scatter,
    size_of,
    whole_on_rank,
)

__version__ = "0.1.0"


def describe():
    """What this build of halox contains (version, MPI library, backends), one string."""
    return build_info()


__all__ = [name for name in dir() if not name.startswith("_") and name != "MPI"]
