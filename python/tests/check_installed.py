"""Smoke test of an installed halox package (cmake --install, pip install or a wheel): run
under mpiexec at 2 ranks from outside the source tree, it imports halox and halox.torch,
fills a periodic halo and prints "python OK <version> <communicator path> <location>" on
rank 0. Exits non-zero on any failure."""

import halox
import halox.torch  # noqa: F401  (the torch layers import too)

g = halox.ProcessGrid(halox.comm_world(), [2])
d = halox.TensorDesc(g, [8], "float64", [halox.DimOptions.halo(1, True)])
x = d.zeros()
x[d.owned_slices] = g.rank + 1
halox.HaloPlan(d, backend="mpi_pack").execute(x)
assert x[0] == 2 - g.rank and x[-1] == 2 - g.rank, x
assert halox.__version__ == halox._halox.VERSION, (halox.__version__, halox._halox.VERSION)
if g.rank == 0:
    print("python OK", halox.__version__, halox.comm_path(), halox.__file__, flush=True)
