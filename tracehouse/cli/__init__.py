"""The ``tracehouse`` command: thin argument parsing over the library packages.

:mod:`.main` puts the parser together and runs a command; each command
family has its own module (:mod:`.ingest`, :mod:`.build`, :mod:`.query`,
:mod:`.simulate`, :mod:`.topology`, :mod:`.report`, :mod:`.export`,
:mod:`.demo`, :mod:`.nsys`, :mod:`.commtrace`, :mod:`.serve`), over the
argument types they share (:mod:`.arguments`). Nothing below this package
imports it.
"""

from __future__ import annotations

from .main import console_main, main

__all__ = ["console_main", "main"]
