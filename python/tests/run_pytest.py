"""Runs the halox pytest suites on every rank of an MPI job (ctest launches it under mpiexec).

Every rank runs the same tests in the same order (no -x, no random order): the tests are
collective. All ranks exit with the worst status of any rank, and "no tests collected"
(pytest's exit code 5) is a failure: a suite that silently runs nothing must not pass.
"""

import os
import sys

import pytest

# --comm mpi4py: mpi4py initialises MPI and the suites pass its communicators; --comm builtin
# (default): no mpi4py in the process, halox initialises MPI and the suites pass halox.Comm.
if "--comm" in sys.argv:
    i = sys.argv.index("--comm")
    os.environ["HALOX_TEST_COMM"] = sys.argv[i + 1]
    del sys.argv[i:i + 2]
if os.environ.get("HALOX_TEST_COMM") == "mpi4py":
    from mpi4py import MPI  # noqa: F401  (initialises MPI before halox loads)

import halox  # noqa: E402


def main():
    comm = halox.comm_world()
    here = os.path.dirname(os.path.abspath(__file__))
    # No cache folder: several ranks would write it at once, into the source tree.
    args = ["-p", "no:cacheprovider", "-q", "-rs", "--color=no", "--rootdir", here]
    if comm.rank != 0:
        args += ["--no-header", "--tb=short"]
    args += sys.argv[1:] or [here]
    rc = int(pytest.main(args))
    if os.environ.get("HALOX_REQUIRE_TORCH") == "1":
        try:
            import torch  # noqa: F401
        except ImportError as e:
            print(f"run_pytest: torch was found at configure time but cannot be imported: {e}",
                  flush=True)
            rc = max(rc, 1)
    worst = comm.allreduce(rc, op="max")
    if worst == pytest.ExitCode.NO_TESTS_COLLECTED:
        if comm.rank == 0:
            print("run_pytest: no tests were collected; treating that as a failure", flush=True)
        worst = 1
    sys.exit(worst)


if __name__ == "__main__":
    main()
