"""The package's build: setuptools (pyproject.toml holds the metadata), plus the native kernels
compiled into the package by every install: ``pip install .``, ``pip install -e .``, a wheel,
an sdist.

Why a build_py step running transcriber/native/build.py, and not a setuptools Extension or
scikit-build-core: the kernels are plain shared libraries loaded with ctypes (one per
instruction set, picked at run time from what the CPU reports), not Python extension modules,
and their build must never fail the install: without a compiler, or when it fails, the package
installs, MLX's own ops serve, and ``build.json`` keeps the reason for ``transcribe doctor``. An
``Extension(optional=True)`` drops that reason and builds one library per extension with
Python's flags; scikit-build-core brings CMake into every install for six compiler calls.
build.py is that build already, and runs alone too (``python transcriber/native/build.py``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join("transcriber", "native")


def _kernels_build():
    """transcriber/native/build.py as a module, loaded by path: importing the package would
    import MLX, which the build environment does not have."""
    spec = importlib.util.spec_from_file_location("_transcriber_kernels_build", os.path.join(HERE, NATIVE, "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithKernels(build_py):
    """build_py, then the kernels next to the package's modules: into the source folder for an
    editable install (where the package is imported from), else into the wheel's tree."""

    def run(self):
        editable = getattr(self, "editable_mode", False)
        if not editable:  # a tree an earlier build left (an older layout: a top-level "jobs" beside the package)
            shutil.rmtree(self.build_lib, ignore_errors=True)  # would go into this wheel too: start from nothing
        super().run()
        target = os.path.join(HERE, NATIVE) if editable else os.path.join(self.build_lib, NATIVE)
        kernels = _kernels_build()
        info = kernels.build(target)
        self.announce(kernels.summary(info), level=2)


class PlatformDistribution(Distribution):
    """The wheel holds native code built for this machine's architecture: a platform tag."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithKernels}, distclass=PlatformDistribution)
