"""Argument types and option shapes that several ``tracehouse`` commands share.

Why one place: every command that takes a path, a name, a rank list, the
warehouse or a parallel layout must reject the same mistakes with the same
words (an empty path is a mistake, not the current folder; tests/
test_cli_inputs.py feeds every option these), and a layout option
(``--tp``, ``--etp``, ...) means the same in ``simulate``, ``topology`` and
``commtrace``. Exit codes: 0 success, 1 some inputs failed (the rest
landed), 2 usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from tracehouse.core.warehouse import ENV_VAR

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: The parallel sizes of a Megatron layout: option -> help, for the commands that take one.
PARALLEL_SIZE_HELP = {
    "--tp": "tensor-parallel size",
    "--pp": "pipeline-parallel size",
    "--dp": "data-parallel size",
    "--cp": "context-parallel size (default 1)",
    "--ep": "expert-parallel size (default 1)",
    "--etp": "expert tensor-parallel size (default: --tp)",
    "--vpp": "virtual pipeline size (model chunks per pipeline rank)",
}
#: Their defaults when not required: no context or expert parallelism, --etp = --tp.
PARALLEL_SIZE_DEFAULTS: dict[str, int | None] = {
    "--cp": 1, "--ep": 1, "--etp": None, "--vpp": None}


def path(text: str) -> Path:
    """argparse type for a path: an empty string is a mistake, not the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (give a file or folder name)")
    return Path(text)


def warehouse_dir(text: str) -> str:
    """argparse type for ``--warehouse``: not empty, and not a file that exists."""
    folder = path(text)
    if folder.exists() and not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a warehouse folder")
    return text


def name(text: str) -> str:
    """argparse type for a name (run, table, program): not empty or blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name")
    return text


def positive(text: str) -> int:
    """argparse type for a count that must be at least 1 (workers, ranks at once)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def rank_list(text: str) -> list[int]:
    """argparse type for ranks: ``0,1,4-7`` -> ``[0, 1, 4, 5, 6, 7]``, sorted, once each."""
    ranks: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            lo = int(first)
            hi = int(last) if last else lo
            if hi < lo or lo < 0:
                raise ValueError
            ranks.extend(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a rank list (e.g. 0,1,4-7)") from None
    return sorted(set(ranks))


def warehouse_parent() -> argparse.ArgumentParser:
    """A parent parser with ``--warehouse DIR``, for the commands that read or write one."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--warehouse",
        type=warehouse_dir,
        metavar="DIR",
        help=f"warehouse folder (default: ${ENV_VAR}, else ./warehouse)",
    )
    return parent


def add_parallel_sizes(parser: argparse.ArgumentParser, options: Sequence[str], *,
                       required: Sequence[str] = ("--tp", "--pp", "--dp"),
                       defaults: Mapping[str, int | None] | None = None,
                       helps: Mapping[str, str] | None = None) -> None:
    """Add the layout's sizes ``options`` (e.g. ``("--tp", "--pp", "--cp")``) to ``parser``:
    whole numbers, ``required`` ones without a default, the others with
    :data:`PARALLEL_SIZE_DEFAULTS` unless ``defaults`` says otherwise; ``helps``
    replaces the help of an option whose meaning the command narrows."""
    defaults = {**PARALLEL_SIZE_DEFAULTS, **(defaults or {})}
    helps = {**PARALLEL_SIZE_HELP, **(helps or {})}
    for option in options:
        if option in required:
            parser.add_argument(option, type=int, required=True, metavar="N",
                                help=helps[option])
        else:
            parser.add_argument(option, type=int, default=defaults[option], metavar="N",
                                help=helps[option])


def add_result_format(parser: argparse.ArgumentParser, wide_help: str) -> None:
    """``--format table|csv|json`` and ``--wide``: how a command prints a result table."""
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    parser.add_argument("--wide", action="store_true", help=wide_help)
