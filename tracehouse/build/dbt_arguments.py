"""The dbt command line as tracehouse passes it on: which command, which options.

:func:`~tracehouse.build.dbt.run_dbt` takes the user's dbt arguments as
they are; these helpers read them (the command and how many words name it,
the target, options already given) and add what a run needs (absolute paths,
plain output when stdout is not a terminal) without parsing dbt's options a
second time: the option names come from dbt's own click command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click


def absolute_path_options(argv: Sequence[str], click_command: click.Command) -> list[str]:
    """``argv`` with the values of the command's path options (``--state``,
    ``--target-path``, ...) made absolute against the current folder."""
    import click

    path_options = {opt for param in click_command.params
                    if isinstance(param.type, click.Path) for opt in param.opts}
    absolute: list[str] = []
    expects_path = False
    for arg in argv:
        if expects_path:
            absolute.append(os.path.abspath(arg))
            expects_path = False
        elif arg in path_options:
            absolute.append(arg)
            expects_path = True
        elif "=" in arg and arg.split("=", 1)[0] in path_options:
            option, value = arg.split("=", 1)
            absolute.append(f"{option}={os.path.abspath(value)}")
        else:
            absolute.append(arg)
    return absolute



def resolve_command(argv: Sequence[str]) -> tuple[int, click.Command] | None:
    """Find the dbt click command named by ``argv`` and how many words name it.

    Groups such as ``docs generate`` take two words; flags go after them.
    """
    import click
    from dbt.cli.main import cli

    command = cli.commands.get(argv[0])
    if command is None:
        return None
    if isinstance(command, click.Group):
        if len(argv) < 2 or argv[1] not in command.commands:
            return None
        return 2, command.commands[argv[1]]
    return 1, command



def target_name(argv: Sequence[str]) -> str | None:
    """The dbt target named by ``--target NAME``/``-t NAME``/``--target=NAME``, else None."""
    return option_value(argv, "--target", "-t")


def option_value(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last option of ``names`` (``--vars V``/``--vars=V``), else None."""
    value = None
    for index, arg in enumerate(argv):
        if arg in names and index + 1 < len(argv):
            value = argv[index + 1]
        elif "=" in arg and arg.split("=", 1)[0] in names:
            value = arg.split("=", 1)[1]
    return value



def without_option(argv: Sequence[str], *names: str) -> list[str]:
    """``argv`` less every option of ``names`` with its value (``--vars V``, ``--vars=V``)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not ("=" in arg and arg.split("=", 1)[0] in names):
            kept.append(arg)
    return kept


def without_target(argv: Sequence[str]) -> list[str]:
    """``argv`` less its target option (so ``build --target spark`` is a plain build)."""
    return without_option(argv, "--target", "-t")



def wants_colours_decided(argv: Sequence[str], of: str = "") -> bool:
    """The user chose dbt's colours (``of="_FILE"``: its log file's): ``--use-colors``/
    ``--no-use-colors`` (``--use-colors-file``/...), or the variables dbt reads them from."""
    flag = "use-colors" + of.lower().replace("_", "-")
    return (any(has_flag(argv, option) for option in (f"--{flag}", f"--no-{flag}"))
            or any(name in os.environ
                   for name in (f"DBT_USE_COLORS{of}", f"DBT_ENGINE_USE_COLORS{of}")))



def stdout_is_a_terminal() -> bool:
    """Whether dbt's lines go to a terminal (then they keep dbt's colours)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False



def has_flag(argv: Sequence[str], flag: str) -> bool:
    """Whether ``argv`` gives ``flag``, alone or as ``flag=value``."""
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)

