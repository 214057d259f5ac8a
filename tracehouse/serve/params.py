"""A request's query parameters, checked before any of them reaches a query.

Why a class of its own: every view takes the same few kinds of parameter
(a run, a rank, an iteration that may be "whole trace", a list of ranks, a
sort column from a fixed list); parsing them in one place means a bad value
is one clear 400 answer naming the parameter, never a SQL error, and every
value reaches DuckDB as a bound parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: How the page writes the NULL iteration (a trace without steps, whole).
WHOLE_TRACE = "whole"


class BadRequest(Exception):
    """A parameter is missing or malformed; the message names it."""


class Params:
    """The query parameters of one request (the last value of a repeated name wins)."""

    def __init__(self, query: Mapping[str, Sequence[str]]) -> None:
        self._values = {name: values[-1] for name, values in query.items() if values}

    def text(self, name: str, default: str | None = None) -> str:
        value = self._values.get(name, default)
        if value is None:
            raise BadRequest(f"parameter {name!r} is required")
        return value

    def optional_text(self, name: str) -> str | None:
        return self._values.get(name) or None

    def integer(self, name: str, default: int | None = None, *, low: int | None = None,
                high: int | None = None) -> int:
        raw = self._values.get(name)
        if raw is None or raw == "":
            if default is None:
                raise BadRequest(f"parameter {name!r} is required")
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BadRequest(f"parameter {name!r} must be an integer, not {raw!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise BadRequest(f"parameter {name!r} must be within [{low}, {high}], not {value}")
        return value

    def iteration(self, name: str = "iteration") -> int | None:
        """An iteration number, or None for :data:`WHOLE_TRACE` (fct_rank_iterations' NULL)."""
        if self.text(name) == WHOLE_TRACE:
            return None
        return self.integer(name)

    def choice(self, name: str, choices: Sequence[str], default: str) -> str:
        value = self._values.get(name) or default
        if value not in choices:
            raise BadRequest(f"parameter {name!r} must be one of {', '.join(choices)}, "
                             f"not {value!r}")
        return value

    def flag(self, name: str) -> bool:
        return self._values.get(name, "") in ("1", "true", "yes")

    def ranks(self, name: str = "ranks", limit: int = 4096) -> list[int]:
        """``0,1,4-7`` as ``[0, 1, 4, 5, 6, 7]`` (at most ``limit`` ranks)."""
        text = self.text(name)
        ranks: set[int] = set()
        try:
            for part in text.split(","):
                first, _, last = part.strip().partition("-")
                low = int(first)
                high = int(last) if last else low
                if high < low or low < 0 or high - low >= limit:
                    raise ValueError
                ranks.update(range(low, high + 1))
        except ValueError:
            raise BadRequest(f"parameter {name!r} is not a rank list such as 0,1,4-7: "
                             f"{text!r}") from None
        if len(ranks) > limit:
            raise BadRequest(f"parameter {name!r} names {len(ranks)} ranks; at most {limit}")
        return sorted(ranks)
