"""Builds the tensorwire package: a CPython extension over libtensorwire.

The extension links the shared libtensorwire (public API only) and finds it at
run time through an rpath to the directory it was linked against, so one copy
of the library serves the C tools and Python alike (no bundled second copy
that could drift from the installed one).

Where the library comes from:
  TW_INCLUDE_DIR   headers (default: ../include next to this file)
  TW_LIB_DIR       directory holding libtensorwire.so (default: ../build)
After `make install` of the C library point both at the install prefix
(e.g. /usr/local/include, /usr/local/lib).
"""
import os

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)
inc = os.path.abspath(os.environ.get("TW_INCLUDE_DIR") or os.path.join(repo, "include"))
lib = os.path.abspath(os.environ.get("TW_LIB_DIR") or os.path.join(repo, "build"))

ext = Extension(
    "tensorwire._tensorwire",
    sources=[os.path.relpath(os.path.join(here, "src", "_tensorwire.c"), here)],
    include_dirs=[inc],
    library_dirs=[lib],
    libraries=["tensorwire"],
    runtime_library_dirs=[lib],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
)

setup(
    name="tensorwire",
    version="0.1.0",
    description="Python binding of libtensorwire: zero-copy NumPy and PyTorch tensor transfer",
    packages=["tensorwire"],
    package_data={"tensorwire": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
    python_requires=">=3.9",
)
