#!/usr/bin/env python3
"""The 2-D heat equation on NumPy arrays split over processes, with a halox halo plan.

Each process holds its block of the grid plus one ghost cell on every side, in a NumPy array
shaped ``desc.local_shape``. Before every step the plan fills the ghost cells: from the
neighbours' blocks across the periodic x direction, and with the wall temperature beyond the
fixed (Dirichlet) y boundaries. Then every process updates its own cells with the 5-point
stencil, with plain NumPy slicing, and the halos are exchanged while the interior is computed
(``start``/``wait``). At the end the blocks are gathered on rank 0 and compared with the same
steps run on the whole grid in one process: the program exits with status 1 if any cell
differs.

    mpiexec -n 4 python3 examples/python/heat2d.py
    mpiexec -n 3 python3 examples/python/heat2d.py --size 60 45 --steps 50

halox must be importable: ``pip install .`` from the repository, or PYTHONPATH=<build>/python.
"""

import argparse
import sys
import time

import numpy as np

import halox

ALPHA = 0.2  # diffusion number: stable for ALPHA <= 1/4
WALL = 1.0   # the temperature beyond the y boundaries


def initial(ny, nx):
    """The starting temperatures, the same on every process."""
    y, x = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    return np.sin(0.3 * y) * np.cos(2 * np.pi * x / nx)


def step(u, out, rows, cols):
    """One Jacobi step of the cells u[rows, cols] of a buffer whose ghost cells are filled."""
    r0, r1 = rows
    c0, c1 = cols
    lap = (u[r0 - 1:r1 - 1, c0:c1] + u[r0 + 1:r1 + 1, c0:c1] + u[r0:r1, c0 - 1:c1 - 1]
           + u[r0:r1, c0 + 1:c1 + 1] - 4 * u[r0:r1, c0:c1])
    out[r0:r1, c0:c1] = u[r0:r1, c0:c1] + ALPHA * lap


def serial(ny, nx, steps):
    """The reference: the whole grid in one process, its frame refreshed by hand."""
    u = np.zeros((ny + 2, nx + 2))
    u[1:-1, 1:-1] = initial(ny, nx)
    nxt = u.copy()
    for _ in range(steps):
        u[0, :] = u[-1, :] = WALL           # fixed y boundaries
        u[:, 0], u[:, -1] = u[:, -2], u[:, 1]  # periodic in x
        step(u, nxt, (1, ny + 1), (1, nx + 1))
        u, nxt = nxt, u
    return u[1:-1, 1:-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, nargs=2, default=[48, 40], metavar=("NY", "NX"))
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    ny, nx = a.size
    comm = halox.comm_world()

    # halox chooses the split (the zeros) from the shape and the halo widths.
    grid = halox.ProcessGrid.create(comm, [0, 0], [ny, nx], [1, 1], [1, 1])
    desc = halox.TensorDesc(grid, [ny, nx], "float64",
                            [halox.DimOptions.halo(1), halox.DimOptions.halo(1, periodic=True)])
    # Non-periodic boundaries (y here) get the wall value; x wraps around.
    plan = halox.HaloPlan(desc, boundary="constant", fill_value=WALL, backend="mpi_pack")

    u, nxt = desc.zeros(), desc.zeros()
    own = desc.owned_slices                    # the owned block inside the local buffer
    u[own] = initial(ny, nx)[desc.global_slices]
    (r0, c0), (r1, c1) = desc.owned_offset, [o + s for o, s in
                                             zip(desc.owned_offset, desc.owned_box().shape)]
    t0 = time.perf_counter()
    for _ in range(a.steps):
        plan.start(u)                          # the exchange runs while the interior is computed
        if r1 - r0 > 2 and c1 - c0 > 2:
            step(u, nxt, (r0 + 1, r1 - 1), (c0 + 1, c1 - 1))
        plan.wait()                            # ghost cells filled: now the boundary ring
        for rows, cols in (((r0, r0 + 1), (c0, c1)), ((r1 - 1, r1), (c0, c1)),
                           ((r0, r1), (c0, c0 + 1)), ((r0, r1), (c1 - 1, c1))):
            if rows[1] > rows[0] and cols[1] > cols[0]:
                step(u, nxt, rows, cols)
        u, nxt = nxt, u
    per_step = (time.perf_counter() - t0) / a.steps

    whole = halox.gather(desc, u)              # the global array on rank 0, None elsewhere
    ok = True
    if comm.rank == 0:
        err = float(np.max(np.abs(whole - serial(ny, nx, a.steps))))
        ok = err == 0.0
        print(f"heat2d: {ny}x{nx} on a {'x'.join(map(str, grid.dims))} grid, {a.steps} steps, "
              f"{per_step * 1e3:.3f} ms per step, max error {err:g} against one process: "
              f"{'OK' if ok else 'FAILED'}")
    ok = comm.bcast(ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
