"""Builds the halox Python package with CMake (pyproject.toml is the entry point).

The pure-Python files come from python/halox, subpackages (halox.torch) included; the extension
halox._halox is built by the project's own CMake build (target halox_python, without tests,
benchmarks or examples) and copied next to them, with the generated _build.py. Settings, all
optional, from the environment:

  HALOX_MPI          mpich, openmpi or auto: the MPI to build for (Debian installs both)
  MPICC              an MPI C compiler wrapper, for any other MPI (Cray, Intel, Spectrum, ...)
  HALOX_ENABLE_CUDA  ON to build the CUDA backends into the extension (default OFF)
  HALOX_CMAKE_ARGS   more CMake arguments, space-separated
  HALOX_JOBS         build parallelism (default: the number of CPUs)
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


def project_version():
    """The C++ library's version, from the top-level CMakeLists.txt (the one source of it)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(halox\s+VERSION\s+([0-9][0-9.]*)", text)
    if not m:
        sys.exit("setup.py: no 'project(halox VERSION ...)' in CMakeLists.txt")
    return m.group(1)


def mpi_flavour():
    """HALOX_MPI, or the flavour behind MPICC (its name or its own version banner)."""
    flavour = os.environ.get("HALOX_MPI")
    mpicc = os.environ.get("MPICC")
    if flavour:
        if flavour not in ("auto", "mpich", "openmpi"):
            sys.exit(f"setup.py: HALOX_MPI={flavour!r}; use mpich, openmpi or auto "
                     "(or MPICC=<wrapper> for another MPI)")
        return flavour
    if not mpicc:
        return "auto"
    for name in ("mpich", "openmpi"):
        if mpicc.endswith("." + name):
            return name
    banner = ""
    for probe in (["-v"], ["--showme:version"]):
        try:
            r = subprocess.run([mpicc, *probe], capture_output=True, text=True, timeout=60)
            banner += r.stdout + r.stderr
        except (OSError, subprocess.TimeoutExpired):
            pass
    if "Open MPI" in banner:
        return "openmpi"
    if "MPICH" in banner:
        return "mpich"
    return "auto"


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds the extension with the project's CMake build."""

    def build_extension(self, ext):
        dest = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        flavour = mpi_flavour()
        # One CMake build per MPI: a cache configured for one MPI must not be reused for another.
        build = Path(self.build_temp).resolve() / f"cmake-{flavour}"
        build.mkdir(parents=True, exist_ok=True)
        args = [
            "cmake", "-S", str(ROOT), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DHALOX_BUILD_TESTS=OFF", "-DHALOX_BUILD_BENCH=OFF", "-DHALOX_BUILD_EXAMPLES=OFF",
            "-DHALOX_ENABLE_PYTHON=ON", f"-DHALOX_PYTHON={sys.executable}",
            f"-DHALOX_MPI={flavour}",
            f"-DHALOX_ENABLE_CUDA={os.environ.get('HALOX_ENABLE_CUDA', 'OFF')}",
        ]
        if os.environ.get("MPICC") and flavour == "auto":
            args.append(f"-DMPI_C_COMPILER={os.environ['MPICC']}")
        if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("HALOX_CMAKE_ARGS", ""))
        jobs = os.environ.get("HALOX_JOBS") or str(os.cpu_count() or 1)
        print(f"halox: building the extension for MPI '{flavour}' in {build}", flush=True)
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "halox_python",
                               "-j", jobs])
        built = build / "python" / "halox"
        dest.mkdir(parents=True, exist_ok=True)
        copied = 0
        for f in built.iterdir():
            if f.name.startswith("_halox") and f.suffix == ".so" or f.name == "_build.py":
                shutil.copy2(f, dest / f.name)
                copied += 1
        if copied != 2:
            sys.exit(f"setup.py: expected the extension and _build.py in {built}")


(ROOT / "build" / "pip").mkdir(parents=True, exist_ok=True)
setup(
    version=project_version(),
    # halox and its subpackages (halox.torch), from python/halox.
    packages=["halox"] + ["halox." + p for p in find_packages("python/halox")],
    package_dir={"halox": "python/halox"},
    ext_modules=[CMakeExtension("halox._halox")],
    cmdclass={"build_ext": CMakeBuild},
    # Keep setuptools' work folders inside build/ with the CMake builds.
    options={"build": {"build_base": "build/pip"}, "egg_info": {"egg_base": "build/pip"}},
    zip_safe=False,
)
