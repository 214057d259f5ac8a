"""Build the optional compiled Kineto scanner, gunzip, slice nesting and replay walk; the rest is in
pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and
ingest uses the pure-Python (msgspec) decoder, saying so once per ingest,
the numpy slice nesting, and the what-if replay its numpy walk.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracehouse.ingest._kineto_scan",
            ["ingest/_kineto_scan.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-unused-function"],
            optional=True,
        ),
        Extension(
            "tracehouse.ingest._gunzip",
            ["ingest/_gunzip.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
            libraries=["z"],
            optional=True,
        ),
        Extension(
            "tracehouse.ingest._nesting",
            ["ingest/_nesting.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
            optional=True,
        ),
        Extension(
            "tracehouse.core._replay_walk",
            ["tracehouse/core/_replay_walk.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
            optional=True,
        ),
    ]
)
