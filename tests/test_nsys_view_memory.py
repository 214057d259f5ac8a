"""The views' build runs under a bounded DuckDB memory limit unless the user set one.

Why it matters: ``tracehouse nsys summary`` on a 713 MB export peaked at
3.6 GiB in its dbt build with the profile's default limit (60% of RAM),
more than its ingest; the views bound it (tracehouse/nsys_views/load.py)
without overriding a limit the user chose, and leave the environment as
they found it.
"""

from __future__ import annotations

import os

import pytest

from tracehouse.nsys_views import load


def test_the_limit_holds_during_the_build_and_goes_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(load.MEMORY_LIMIT_VARIABLE, raising=False)
    with load.bounded_memory():
        assert os.environ[load.MEMORY_LIMIT_VARIABLE] == load.VIEW_BUILD_MEMORY_LIMIT
    assert load.MEMORY_LIMIT_VARIABLE not in os.environ


def test_a_limit_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(load.MEMORY_LIMIT_VARIABLE, "3GB")
    with load.bounded_memory():
        assert os.environ[load.MEMORY_LIMIT_VARIABLE] == "3GB"
    assert os.environ[load.MEMORY_LIMIT_VARIABLE] == "3GB"



def test_the_views_limit_keeps_a_parse_of_its_own() -> None:
    """profiles.yml renders the limit into the connection settings that dbt checks a
    saved parse against: a view after a plain build (or the other way round) would
    parse the whole project again if both shared one saved parse."""
    from tracehouse.build import parse_cache

    plain = parse_cache.variant_of(None, None)
    view = parse_cache.variant_of(None, None, load.VIEW_BUILD_MEMORY_LIMIT)
    assert plain == "" and view != plain
    assert view != parse_cache.variant_of(None, None, "3GB")
    assert parse_cache.variant_of("{whatif: false}", None) != parse_cache.variant_of(
        "{whatif: false}", None, load.VIEW_BUILD_MEMORY_LIMIT)
