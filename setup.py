"""Optional C extensions. Metadata lives in pyproject.toml; this file only adds ext_modules.

Building them is optional (aiokafka's ``ve_build_ext``): without a C compiler, or when the
build fails, setup warns and installs the pure-Python package. ``TIERLOG_NO_EXTENSIONS=1``
skips the build altogether (and, at runtime, the import).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, PlatformError


class BuildFailed(Exception):
    pass


class ve_build_ext(build_ext):  # aiokafka's name for the pattern
    """build_ext that turns a failed compile into a warning."""

    def run(self) -> None:
        try:
            super().run()
        except (PlatformError, FileNotFoundError, OSError) as exc:
            warnings.warn(
                f"tierlog: C extensions not built ({exc}); using pure Python", stacklevel=1
            )

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, CompileError, ExecError, PlatformError, ValueError) as exc:
            warnings.warn(
                f"tierlog: building {ext.name} failed ({exc}); using pure Python", stacklevel=1
            )


ext_modules = []
if os.environ.get("TIERLOG_NO_EXTENSIONS", "") != "1":
    ext_modules.append(
        Extension(
            "tierlog.records._speedups._decode",
            ["src/tierlog/records/_speedups/_decode.c"],
            extra_compile_args=["-O2"] if os.name != "nt" else [],
            optional=True,
        )
    )
    ext_modules.append(
        Extension(
            "tierlog.records._speedups._offset_map",
            ["src/tierlog/records/_speedups/_offset_map.c"],
            extra_compile_args=["-O2"] if os.name != "nt" else [],
            optional=True,
        )
    )
    ext_modules.append(
        Extension(
            "tierlog.records._speedups._keys",
            ["src/tierlog/records/_speedups/_keys.c"],
            extra_compile_args=["-O2"] if os.name != "nt" else [],
            optional=True,
        )
    )

setup(ext_modules=ext_modules, cmdclass={"build_ext": ve_build_ext})
