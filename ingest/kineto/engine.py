"""Which engine turns Kineto traces into lake tables: one enum for the runner, the CLI
and the tests.

Why an enum: the choice used to be spread over a CLI option (``--engine
native|perfetto|spark``), an environment variable (``TRACEHOUSE_DECODER=python``)
and a ``decoder="c"|"python"`` argument, each spelled and checked on its own.
Like HTA's ``ParserBackend`` (a ``str`` enum whose values are what users
type), each member's value is its command-line spelling, and a bad value is
an error that names the choices.

The native engines give identical lake tables (tests/test_ingest_decoders.py
checks it); the compiled scanner hands anything it does not fully understand
to msgspec, which words every error. Perfetto's trace processor reads a few
things differently (:mod:`ingest.kineto.perfetto`).
"""

from __future__ import annotations

import os
from enum import Enum

#: The environment variable that overrides what ``native`` means (benchmarks, and
#: checking the fallback the way an install without a C compiler runs).
DECODER_ENV = "TRACEHOUSE_DECODER"


class UnknownEngine(ValueError):
    """An engine name (an argument or ``$TRACEHOUSE_DECODER``) that is none of the choices."""


class KinetoEngine(str, Enum):
    """How a Kineto trace becomes lake tables."""

    #: The compiled scanner where it is built, else msgspec (the default).
    NATIVE = "native"
    #: The compiled scanner (``ingest/_kineto_scan.c``); msgspec takes over any file
    #: it does not fully understand, and words its error.
    SCANNER = "scanner"
    #: msgspec alone: what an install without a C compiler runs, 2-3x slower.
    MSGSPEC = "msgspec"
    #: Perfetto's trace processor (``--trace-processor-bin``, ``$TRACE_PROCESSOR_BIN``).
    PERFETTO = "perfetto"
    #: ``native`` in Spark tasks instead of local worker processes (the spark extra).
    SPARK = "spark"

    @classmethod
    def parse(cls, value: KinetoEngine | str) -> KinetoEngine:
        """The member named ``value``; :class:`UnknownEngine` naming the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise UnknownEngine(f"engine must be one of {', '.join(choices())}, "
                                f"not {value!r}") from None

    @property
    def lake_name(self) -> str:
        """The ``traces.engine`` value: ``native`` for every tracehouse parser (their
        tables are identical), ``perfetto`` for the trace processor's."""
        return "perfetto" if self is KinetoEngine.PERFETTO else "native"

    @property
    def parser(self) -> KinetoEngine:
        """The engine a worker runs: ``spark`` is where ``native`` runs, not a parser."""
        return KinetoEngine.NATIVE if self is KinetoEngine.SPARK else self


def choices() -> list[str]:
    """Every engine's spelling, in the enum's order (the CLI's ``--engine`` choices)."""
    return [engine.value for engine in KinetoEngine]


#: ``$TRACEHOUSE_DECODER`` values: the enum's, and the older ``python``/``c``.
_DECODER_VALUES = {"msgspec": KinetoEngine.MSGSPEC, "python": KinetoEngine.MSGSPEC,
                   "scanner": KinetoEngine.SCANNER, "c": KinetoEngine.SCANNER}


def decoder_override() -> KinetoEngine | None:
    """What ``$TRACEHOUSE_DECODER`` makes of ``native``: None when unset or empty."""
    value = os.environ.get(DECODER_ENV, "")
    if not value:
        return None
    try:
        return _DECODER_VALUES[value]
    except KeyError:
        raise UnknownEngine(f"${DECODER_ENV}={value!r} is none of "
                            f"{', '.join(_DECODER_VALUES)}; unset it for the default "
                            "(the compiled scanner where built)") from None


def scanner_built() -> bool:
    """Whether the compiled scanner (``_kineto_scan``, built by ``pip install``) loads."""
    try:
        from .. import _kineto_scan  # noqa: F401
    except ImportError:
        return False
    return True


def native_decoder(engine: KinetoEngine) -> KinetoEngine:
    """The decoder a native engine runs in this process: SCANNER or MSGSPEC.

    ``native`` (and ``spark``) is the scanner where it is built, unless
    ``$TRACEHOUSE_DECODER`` says otherwise; ``scanner`` and ``msgspec`` are
    themselves. Raises :class:`UnknownEngine` for a bad ``$TRACEHOUSE_DECODER``
    and ValueError for the Perfetto engine, which has no native decoder.
    """
    if engine is KinetoEngine.PERFETTO:
        raise ValueError("the perfetto engine has no native decoder")
    if engine in (KinetoEngine.SCANNER, KinetoEngine.MSGSPEC):
        return engine
    override = decoder_override()
    if override is not None:
        return override
    return KinetoEngine.SCANNER if scanner_built() else KinetoEngine.MSGSPEC
