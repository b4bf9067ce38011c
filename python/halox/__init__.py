"""halox: halo exchange and redistribution of distributed N-d tensors over MPI.

Describe a distributed tensor once (:class:`ProcessGrid`, :class:`DimOptions`,
:class:`TensorDesc`), plan its communication once (:class:`HaloPlan`,
:class:`RedistributePlan`, :class:`BoxGatherPlan`), then execute the plan many times on NumPy
arrays or torch tensors, which halox reads and writes in place (never copied).

Communicators are :class:`Comm` objects (:func:`comm_world`), mpi4py communicators when
mpi4py runs on halox's MPI, or integer Fortran handles (``comm.py2f()``). Importing halox
initialises MPI unless another binding already did, and then finalises it at exit. Every halox
failure raises :class:`Error`, the same on every rank for collective calls.

``halox.torch`` adds autograd functions and spatially parallel layers for PyTorch.
"""

import sys as _sys

from . import _build


def _check_mpi4py():
    """A loaded mpi4py must run on the MPI library halox was built with: two MPI libraries in
    one process crash in ways far from their cause, so a mismatch stops the import here,
    before the extension loads its MPI."""
    mpi = _sys.modules.get("mpi4py.MPI")
    if mpi is None or _build.MPI_FLAVOUR not in ("mpich", "openmpi"):
        return
    lib = mpi.Get_library_version().splitlines()[0]
    theirs = "openmpi" if "Open MPI" in lib else "mpich" if "MPICH" in lib else "another MPI"
    if theirs != _build.MPI_FLAVOUR:
        raise ImportError(
            f"halox was built for {_build.MPI_FLAVOUR} but the mpi4py loaded in this process "
            f"runs on {theirs} ({lib.strip()}); two MPI libraries cannot share a process. Drop "
            "the mpi4py import and use halox.comm_world(), or install the halox built for "
            f"{theirs} (HALOX_MPI={theirs})")


_check_mpi4py()

from ._halox import (  # noqa: F401
    Backend,
    BoundaryFill,
    Box,
    BoxGatherPlan,
    Comm,
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
    as_comm,
    backend_from_string,
    bn_merge_stats,
    choose_grid,
    comm_path,
    comm_self,
    comm_world,
    device_backends,
    dtype,
    gather,
    host_backends,
    mpi_library_version,
    scatter,
    size_of,
    whole_on_rank,
    window_input_footprint,
    window_input_span,
    window_output_shape,
    window_partition,
)

from . import _halox

__version__ = _build.VERSION
if _halox.VERSION != __version__:
    raise ImportError(f"halox: the Python files are version {__version__} but the extension "
                      f"{_halox.__file__} is {_halox.VERSION}; reinstall the package")


def build_info():
    """What this build contains and runs on, one multi-line string: version, MPI library,
    backends, and the Python side: which communicators are in use (``mpi4py`` when mpi4py is
    loaded and runs on halox's MPI, else ``built-in``), who initialised MPI, its thread level."""
    who = "halox" if _halox._mpi_initialised_by_halox() else "the program (or mpi4py)"
    return (_halox.build_info() +
            f"  Python: halox {__version__}, communicators {comm_path()}, MPI initialised by "
            f"{who}, thread level {_halox._MPI_THREAD_LEVEL}\n")


def dims_create(nprocs, ndims):
    """``ndims`` factors of ``nprocs``, as equal as possible, largest first: the grid
    MPI_Dims_create (mpi4py's ``Compute_dims``) gives, for programs without an MPI binding.
    :func:`choose_grid` also weighs a tensor's shape and halos."""
    nprocs, ndims = int(nprocs), int(ndims)
    if nprocs < 1 or ndims < 1:
        raise Error(f"dims_create: nprocs={nprocs}, ndims={ndims}; both must be at least 1")
    factors, p, n = [], 2, nprocs
    while n > 1 and p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1:
        factors.append(n)
    dims = [1] * ndims
    for q in sorted(factors, reverse=True):
        dims[dims.index(min(dims))] *= q
    return sorted(dims, reverse=True)


def describe():
    """What this build of halox contains (version, MPI library, backends), one string."""
    return build_info()


__all__ = [name for name in dir() if not name.startswith("_")]
