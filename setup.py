"""Build the optional compiled Kineto scanner and slice nesting; the rest is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and
ingest uses the pure-Python (msgspec) decoder, saying so once per ingest,
and the numpy slice nesting.
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
            "tracehouse.ingest._nesting",
            ["ingest/_nesting.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall"],
            optional=True,
        ),
    ]
)
