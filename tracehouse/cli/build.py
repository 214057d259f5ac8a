"""``tracehouse build``: dbt on the warehouse, through :func:`tracehouse.build.dbt.run_dbt`.

Every argument but tracehouse's own ``--warehouse`` goes to dbt, in order,
wherever it stands: the main parser leaves unknown options to this command
(:func:`take_own_options`).
"""

from __future__ import annotations

import argparse
from typing import Any

from tracehouse.cli.arguments import warehouse_dir, warehouse_parent

__all__ = ["add_parser", "take_own_options"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse build`` on the main parser's subcommands."""
    build = sub.add_parser(
        "build",
        parents=[warehouse_parent()],
        help="run dbt (default: dbt build) on the warehouse",
        description="Run the dbt project on the warehouse. tracehouse's own option "
                    "(--warehouse) may stand anywhere; every other argument goes to dbt, in "
                    "order, e.g. `tracehouse build -- run -s stg_lake__slices`.",
    )
    build.add_argument("dbt_args", nargs=argparse.REMAINDER, metavar="DBT_ARGS",
                       help="dbt command and arguments (default: build)")
    build.set_defaults(handler=run)


def own_build_options(dbt_args: list[str]) -> tuple[str | None, list[str]]:
    """``--warehouse DIR`` (or ``--warehouse=DIR``) wherever it stands among the
    arguments argparse left to dbt, and those arguments without it (the last
    one given wins, as argparse does). dbt has no ``--warehouse``, so the
    option is always tracehouse's."""
    warehouse = None
    kept: list[str] = []
    words = iter(dbt_args)
    for word in words:
        if word == "--warehouse":
            warehouse = next(words, "")
        elif word.startswith("--warehouse="):
            warehouse = word.split("=", 1)[1]
        else:
            kept.append(word)
    return warehouse, kept


def take_own_options(args: argparse.Namespace, unknown: list[str],
                     parser: argparse.ArgumentParser) -> None:
    """Give dbt the options argparse did not know: dbt options before any dbt command
    (``tracehouse build --full-refresh``) go to dbt's default command, build;
    tracehouse's own options among them (``build --target spark --warehouse W``)
    are taken out. A bad ``--warehouse`` is a usage error (``parser.error`` exits 2)."""
    warehouse, args.dbt_args = own_build_options([*unknown, *args.dbt_args])
    if warehouse is not None:
        try:
            args.warehouse = warehouse_dir(warehouse)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --warehouse: {exc}")


def run(args: argparse.Namespace) -> int:
    """Handler of ``tracehouse build``."""
    from tracehouse.build.dbt import run_dbt
    from tracehouse.core.warehouse import resolve_warehouse

    dbt_args = list(args.dbt_args)
    if dbt_args[:1] == ["--"]:
        dbt_args = dbt_args[1:]
    return run_dbt(dbt_args, warehouse=resolve_warehouse(args.warehouse))
