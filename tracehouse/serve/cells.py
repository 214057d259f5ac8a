"""How a figure travels to the page: its mart value and its text, formatted once, here.

Why both: the page shows the text, formatted by the report's own
formatters (:func:`tracehouse.reports.html.ms` and ``pct``), so the viewer
and the report print a mart value the same way; the raw value rides along
(``data-value`` on the page) for sorting, colour scales and the browser
test, which checks that what is on screen is the mart's number.

JSON numbers are doubles in the browser: an integer beyond 2**53 (an
absolute nanosecond timestamp) would silently lose its last digits, so it
travels as a string.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

from tracehouse.reports.findings import figure_text
from tracehouse.reports.html import ms, pct

#: Largest integer a JavaScript number holds exactly.
MAX_SAFE_INTEGER = 2**53 - 1

Cell = list[Any]  # [raw value, text]


def plain(value: Any) -> Any:
    """A DuckDB value as a JSON value the browser reads back unchanged."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) <= MAX_SAFE_INTEGER else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return plain(int(value)) if value == value.to_integral_value() else float(value)
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (dt.date, dt.datetime, dt.time, dt.timedelta)):
        return value.isoformat() if hasattr(value, "isoformat") else str(value)
    return str(value)


def us(ns: float | None) -> str:
    """Nanoseconds as microseconds text, for kernels (``—`` when unknown)."""
    return "—" if ns is None else f"{ns / 1e3:,.1f} µs"


def ms3(ns: float | None) -> str:
    """Nanoseconds as milliseconds to the microsecond, for positions in a step."""
    return "—" if ns is None else f"{ns / 1e6:,.3f} ms"


def one_decimal(value: float | None) -> str:
    """A figure to one decimal (a bandwidth in GB/s)."""
    return "—" if value is None else f"{value:,.1f}"


def times(ratio: float | None) -> str:
    """A ratio against a reference, as the report writes it (``1.50×``)."""
    return "—" if ratio is None else f"{ratio:.2f}×"


def count(value: int | None) -> str:
    """An integer with thousands separators (``—`` when unknown)."""
    return "—" if value is None else f"{int(value):,}"


def text(value: Any) -> str:
    """Any value as plain text (``—`` when unknown); the page shows it as text, never markup."""
    return "—" if value is None else str(value)


def iteration_label(iteration: int | None) -> str:
    """An iteration as the report names it: its number, or ``whole trace`` for NULL."""
    return "whole trace" if iteration is None else str(iteration)


#: Formatter of each cell kind (``figure``: a finding's evidence figure, as the report writes it).
FORMATS = {"ms": ms, "ms3": ms3, "us": us, "x1": one_decimal, "times": times, "pct": pct,
           "int": count, "text": text, "figure": figure_text}


def cell(value: Any, kind: str) -> Cell:
    """``[raw, text]`` of one value, formatted as ``kind`` (a key of :data:`FORMATS`)."""
    return [plain(value), FORMATS[kind](value)]


def table(columns: Sequence[tuple[str, str, str]], records: Sequence[dict[str, Any]],
          key: Sequence[str] = ()) -> dict[str, Any]:
    """A table for the page: ``columns`` as ``(column, heading, kind)``, one row per record.

    Each row carries its cells and, when ``key`` names columns, their raw
    values (what a click on the row sends back to the server).
    """
    return {
        "columns": [{"key": column, "label": heading, "numeric": kind != "text"}
                    for column, heading, kind in columns],
        "rows": [{"key": {name: plain(record.get(name)) for name in key},
                  "cells": [cell(record.get(column), kind) for column, _, kind in columns]}
                 for record in records],
    }
