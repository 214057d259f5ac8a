"""The ``tracehouse`` command: a thin argument layer over library functions.

Each command family has its module here (:mod:`.ingest`, :mod:`.build`,
:mod:`.query` for ``sql`` and ``compare``, :mod:`.simulate`,
:mod:`.topology`, :mod:`.report`, :mod:`.export`, :mod:`.demo`,
:mod:`.nsys`, :mod:`.commtrace`, :mod:`.serve`, :mod:`.findings`,
:mod:`.whatif`): it registers its
subcommand and parses its arguments, then calls one function that tests
call directly; the shared argument types are in :mod:`.arguments`. This
module puts the parser together and runs one command. Exit codes: 0
success, 1 some inputs failed (the rest landed), 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tracehouse.cli import (
    build,
    commtrace,
    demo,
    export,
    findings,
    ingest,
    nsys,
    query,
    report,
    serve,
    simulate,
    topology,
    whatif,
)
from tracehouse.cli.arguments import EXIT_FAILED

#: Exit status of a command whose reader closed the pipe (``| head``): what any
#: unix tool killed by SIGPIPE reports, 128 + 13.
EXIT_BROKEN_PIPE = 141


def _version() -> str:
    """The installed distribution's version (pyproject.toml), else ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracehouse")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The whole ``tracehouse`` parser, its subcommands in the order ``--help`` lists them."""
    parser = argparse.ArgumentParser(
        prog="tracehouse",
        description="SQL-centric analytics warehouse for distributed LLM-training traces.",
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    ingest.add_parser(sub)
    build.add_parser(sub)
    query.add_parsers(sub)
    simulate.add_parser(sub)
    topology.add_parser(sub)
    report.add_parser(sub)
    export.add_parser(sub)
    demo.add_parser(sub)
    nsys.add_parser(sub)
    commtrace.add_parser(sub)
    serve.add_parser(sub)
    findings.add_parser(sub)
    whatif.add_parser(sub)
    return parser


def _reader_went_away() -> int:
    """Standard output's reader closed the pipe: stop quietly, like other unix tools.

    What is still buffered can never be written; standard output is pointed at
    /dev/null so that flushing it at exit does not fail again (Python's advice
    for SIGPIPE, docs.python.org/3/library/signal.html#note-on-sigpipe).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (an embedding's stdout)
        pass
    return EXIT_BROKEN_PIPE


def console_main() -> int:
    """The ``tracehouse`` console script: :func:`main` on ``sys.argv``.

    A process that runs ``tracehouse ingest`` does nothing else, so it keeps
    pyarrow from importing pandas (see ``ingest.no_pandas.keep_pandas_out``).
    """
    if sys.argv[1:2] == ["ingest"]:
        from tracehouse.ingest.no_pandas import keep_pandas_out

        keep_pandas_out()
    code = main()
    try:
        sys.stdout.flush()  # here, not at exit, where a closed pipe cannot be caught
    except BrokenPipeError:
        return _reader_went_away()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for tests and embedding: parse ``argv`` and run one command."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if getattr(args, "handler", None) is build.run:
            build.take_own_options(args, unknown, parser)
        elif unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        return _reader_went_away()
    except OSError as exc:  # a path the user gave cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; nothing partial was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(console_main())
