"""``tracehouse serve``'s server on a small real DuckDB file: what it answers, and what it refuses.

Fast tests (no ingest, no dbt): the database is a real DuckDB file holding a
``fct_run_summary`` table whose one run has a hostile name, published the
way a build publishes (a finished file renamed over the old one). What the
views show from real marts is tests/test_serve_marts.py's and
tests/test_serve_browser.py's business.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from conftest import NASTY_NAME, REPO_ROOT
from tracehouse.cli import main
from tracehouse.serve import DEFAULT_HOST
from tracehouse.serve.cells import MAX_SAFE_INTEGER, plain
from tracehouse.serve.marts import MartReader, WarehouseNotReady
from tracehouse.serve.params import BadRequest, Params
from tracehouse.serve.server import ASSETS, ViewerServer, _json
from tracehouse.serve.step_parts import step_part_columns, step_parts
from viewer import serving


def _publish_runs(warehouse: Path, runs: list[str]) -> Path:
    """Write a database with ``fct_run_summary`` rows for ``runs`` and rename it into place."""
    warehouse.mkdir(parents=True, exist_ok=True)
    staged = warehouse / ".staged.duckdb"
    staged.unlink(missing_ok=True)
    con = duckdb.connect(str(staged))
    con.execute("create table fct_run_summary (run_id varchar, timing_source varchar, "
                "ranks bigint, iterations bigint, mean_step_ns double)")
    con.executemany("insert into fct_run_summary values (?, 'gpu', 4, 2, 1.5e6)",
                    [[run] for run in runs])
    con.close()
    database = warehouse / "tracehouse.duckdb"
    os.replace(staged, database)
    return database


@pytest.fixture
def small_warehouse(tmp_path: Path) -> Path:
    root = tmp_path / "warehouse"
    _publish_runs(root, [NASTY_NAME])
    return root


@pytest.fixture
def running(small_warehouse: Path) -> Iterator[ViewerServer]:
    with serving(small_warehouse) as server:
        yield server


def _request(server: ViewerServer, path: str, method: str = "GET",
             host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    address, port = server.server_address[:2]
    connection = http.client.HTTPConnection(address, port, timeout=10)
    headers = {"Host": host} if host is not None else {}
    connection.request(method, path, headers=headers)
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}, body


def test_binds_the_loopback_by_default(running: ViewerServer) -> None:
    assert DEFAULT_HOST == "127.0.0.1"
    assert running.server_address[0] == "127.0.0.1"
    assert running.url.startswith("http://127.0.0.1:")


def test_the_page_loads_nothing_from_elsewhere(running: ViewerServer) -> None:
    for path in ASSETS:
        status, headers, body = _request(running, path)
        assert status == 200, path
        assert b"http://" not in body and b"https://" not in body and b"//cdn" not in body
        policy = headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert headers["x-content-type-options"] == "nosniff"
    status, _headers, page = _request(running, "/")
    assert page.count(b"<script") == 1 and b'src="/static/viewer.js"' in page


def test_hostile_run_names_travel_as_json_text(running: ViewerServer) -> None:
    status, headers, body = _request(running, "/api/runs")
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert "content-security-policy" in headers
    runs = json.loads(body)["runs"]
    assert [run["run_id"] for run in runs] == [NASTY_NAME]
    assert runs[0]["mean_step"] == [1500000.0, "1.50 ms"]  # raw value, the report's text


def test_answers_only_requests_addressed_to_the_loopback(running: ViewerServer) -> None:
    """A page elsewhere cannot reach the viewer through a name resolving to 127.0.0.1."""
    port = running.server_address[1]
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
        status, _headers, body = _request(running, "/api/runs", host=host)
        assert status == 403, host
        assert NASTY_NAME.encode() not in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert _request(running, "/api/runs", host=host)[0] == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_nothing_but_get_and_head(running: ViewerServer, small_warehouse: Path,
                                  method: str) -> None:
    database = small_warehouse / "tracehouse.duckdb"
    before = database.read_bytes()
    status, _headers, _body = _request(running, "/api/runs", method=method)
    assert status == 501
    assert database.read_bytes() == before


def test_unknown_paths_and_bad_parameters_say_which(running: ViewerServer) -> None:
    status, _headers, body = _request(running, "/api/sql?q=drop")
    assert status == 404 and "no such page" in json.loads(body)["error"]
    status, _headers, body = _request(running, "/api/overview")
    assert status == 400 and "'run' is required" in json.loads(body)["error"]
    status, _headers, body = _request(running, "/api/overview?run=nope")
    assert status == 400 and "unknown run 'nope'" in json.loads(body)["error"]


def test_a_publish_is_seen_by_the_next_request_never_by_a_running_one(
        small_warehouse: Path) -> None:
    """A build renames its finished database over the published one
    (tracehouse.core.publish): a cursor opened before keeps the old file whole,
    the next one reads the new file."""
    reader = MartReader(small_warehouse)
    try:
        with reader.cursor() as before:
            _publish_runs(small_warehouse, ["rebuilt_a", "rebuilt_b"])
            assert before.execute("select run_id from fct_run_summary").fetchall() == [
                (NASTY_NAME,)]
            with reader.cursor() as after:
                assert sorted(after.execute("select run_id from fct_run_summary")
                              .fetchall()) == [("rebuilt_a",), ("rebuilt_b",)]
    finally:
        reader.close()


def test_cursors_cannot_reach_files_or_write(small_warehouse: Path, tmp_path: Path) -> None:
    """The same rules as ``tracehouse sql``: read-only, no file outside the lake."""
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    reader = MartReader(small_warehouse)
    try:
        with reader.cursor() as cur:
            with pytest.raises(duckdb.PermissionException):
                cur.execute("select * from read_csv(?)", [str(outside)]).fetchall()
            with pytest.raises(duckdb.Error):
                cur.execute("create table t as select 1")
            with pytest.raises(duckdb.Error):
                cur.execute("set enable_external_access = true")
    finally:
        reader.close()


def test_the_marts_are_listed_once_per_request(small_warehouse: Path) -> None:
    """tables() remembers its answer while a viewer cursor is open, and only then."""
    from tracehouse.serve import marts

    reader = MartReader(small_warehouse)
    try:
        with reader.cursor() as cur:
            assert marts.tables(cur) == {"fct_run_summary"}
            cur.execute("create table memory.main.made_later (x int)")
            assert "made_later" not in marts.tables(cur)  # remembered, not asked again
            assert id(cur) in marts._TABLES
        assert id(cur) not in marts._TABLES
        with reader.cursor() as cur:
            assert "made_later" in marts.tables(cur)  # the next request asks again
        plain = duckdb.connect()
        plain.execute("create table t (x int)")
        assert marts.tables(plain) == {"t"}
        plain.execute("create table u (x int)")
        assert marts.tables(plain) == {"t", "u"}  # a cursor not of the viewer: never kept
        plain.close()
    finally:
        reader.close()


def test_spills_go_to_a_private_folder_removed_on_close(small_warehouse: Path) -> None:
    reader = MartReader(small_warehouse)
    with reader.cursor() as cur:
        spill = Path(cur.execute("select current_setting('temp_directory')").fetchall()[0][0])
    assert spill.is_dir() and small_warehouse not in spill.parents
    reader.close()
    assert not spill.exists()


def test_no_database_or_no_marts_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(WarehouseNotReady, match="tracehouse build"):
        MartReader(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    duckdb.connect(str(empty / "tracehouse.duckdb")).close()
    with pytest.raises(WarehouseNotReady, match="no marts yet"):
        MartReader(empty)


def test_cli_without_a_warehouse_is_a_usage_error(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--warehouse", str(tmp_path / "none"), "--port", "0"]) == 2
    assert "tracehouse build" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_it_and_leaves_the_warehouse_as_it_was(small_warehouse: Path) -> None:
    database = small_warehouse / "tracehouse.duckdb"
    before = (database.read_bytes(), sorted(p.name for p in small_warehouse.iterdir()))
    # As a terminal's Ctrl-C finds it: a shell that started these tests in the
    # background (`.ci/run &`) left SIGINT ignored, which children inherit, and
    # Python then installs no KeyboardInterrupt handler.
    process = subprocess.Popen(
        [sys.executable, "-m", "tracehouse.cli", "serve", "--warehouse", str(small_warehouse),
         "--port", "0"], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
        preexec_fn=_interruptible)
    try:
        line = process.stderr.readline()
        assert "read-only at http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/api/runs")
        assert connection.getresponse().status == 200
        connection.close()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert "stopped" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (database.read_bytes(), sorted(p.name for p in small_warehouse.iterdir())) == before


# --------------------------------------------------------------------------- pieces


def test_integers_beyond_double_precision_travel_as_strings() -> None:
    assert plain(MAX_SAFE_INTEGER) == MAX_SAFE_INTEGER
    assert plain(1_700_000_000_123_456_789) == "1700000000123456789"
    assert plain(float("nan")) is None


def test_answers_are_compact_utf8_json_even_with_a_lone_surrogate() -> None:
    """msgspec writes the answers; a string UTF-8 cannot hold goes the standard library's way,
    the character replaced, and hostile text stays text inside a JSON string."""
    payload = {"name": NASTY_NAME, "ts": [1, 2**40], "dur": [0.5], "none": None, 3: (1, 2)}
    body, kind = _json(payload)
    assert kind == "application/json; charset=utf-8"
    # The bytes the standard library wrote before, compact as the page's payload sizes assume.
    assert body == json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    body, _ = _json({"name": "bad \ud800 <script>"})
    assert json.loads(body) == {"name": "bad ? <script>"}  # as str.encode(errors="replace")
    assert json.loads(_json({"x": float("nan")})[0]) == {"x": None}


def test_parameters_are_checked_before_any_query() -> None:
    params = Params({"ranks": ["0,2-4"], "iteration": ["whole"], "n": ["x"], "sort": ["evil"]})
    assert params.ranks() == [0, 2, 3, 4]
    assert params.iteration() is None
    with pytest.raises(BadRequest, match="'n' must be an integer"):
        params.integer("n")
    with pytest.raises(BadRequest, match="'sort' must be one of"):
        params.choice("sort", ("dur_ns",), "dur_ns")
    with pytest.raises(BadRequest, match="rank list"):
        Params({"ranks": ["3-1"]}).ranks()


def test_step_parts_are_the_yaml_columns_with_the_reports_labels() -> None:
    parts = step_part_columns()
    assert "step_idle_ns" in parts and "step_compute_ns" in parts
    assert all(column.startswith("step_") and column.endswith("_ns") for column in parts)
    shown = step_parts("gpu", ["step_ns", *parts])
    labels = {part.column: part.label for part in shown}
    assert shown[0].column == "step_ns"
    assert labels["step_idle_ns"] == "rank idle"  # the report's headline label
    assert labels["step_optimizer_ns"] == "optimizer"  # the CPU label: the GPU has none
    assert step_parts("cpu", ["step_compute_ns"])[0].label == "forward + backward"
    assert step_parts("gpu", ["step_ns"]) == shown[:1]  # a column the mart lacks is left out
