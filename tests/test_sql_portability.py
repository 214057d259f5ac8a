"""Every model (and data test), compiled for the spark target, reads as Spark SQL.

`dbt compile --target spark` renders each model with the Spark
implementations of the dispatched macros (macros/portable.sql); sqlglot
then parses the result in the spark dialect (tests/spark_portability.py
says what is checked beyond parsing). A failure names the model and the
construct. Compiling needs dbt-spark but no Spark: with the cache not
populated and the per-trace models rebuilt whole on Spark
(`builds_per_trace()` is false there), dbt never opens a connection.
The Spark build itself (tests/test_spark.py) is the dynamic half.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import REPO_ROOT
from spark_portability import check_spark_sql, spark_functions
from tracehouse.build.dbt import run_dbt

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

needs_dbt_spark = pytest.mark.skipif(
    importlib.util.find_spec("dbt.adapters.spark") is None,
    reason="dbt-spark is not installed (the spark extra: pip install -e '.[spark]')")


@pytest.fixture(scope="module")
def compiled_for_spark(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """unique_id -> compiled SQL of every model and data test, for the spark target."""
    warehouse = tmp_path_factory.mktemp("portability")
    code = run_dbt(["compile", "--target", "spark", "--no-populate-cache"], warehouse)
    assert code == 0, "dbt compile --target spark failed; see its output"
    target = warehouse / "dbt" / "target"
    manifest = json.loads((target / "manifest.json").read_text())
    compiled: dict[str, str] = {}
    for unique_id, node in manifest["nodes"].items():
        if node["resource_type"] not in ("model", "test") or node["package_name"] != "tracehouse":
            continue
        path = target / "compiled" / "tracehouse" / node["original_file_path"]
        if node["resource_type"] == "test" and node["original_file_path"].endswith(".yml"):
            path = path / f"{node['name']}.sql"
        compiled[unique_id] = node.get("compiled_code") or (
            path.read_text() if path.is_file() else "")
    return compiled


@needs_dbt_spark
def test_every_model_is_compiled(compiled_for_spark: dict[str, str]) -> None:
    # The what-if chain is DuckDB-only (dbt_project.yml: its Python models).
    models = sorted(p.stem for p in (REPO_ROOT / "models").rglob("*.sql")
                    if "whatif" not in p.parts)
    compiled = {uid.split(".")[-1] for uid in compiled_for_spark if uid.startswith("model.")}
    assert models and set(models) <= compiled
    empty = [uid for uid, sql in compiled_for_spark.items() if not sql.strip()]
    assert not empty, f"no compiled SQL for: {empty}"


@needs_dbt_spark
def test_every_model_and_test_is_spark_sql(compiled_for_spark: dict[str, str]) -> None:
    functions = spark_functions()
    problems = [problem.line()
                for unique_id, sql in sorted(compiled_for_spark.items())
                for problem in check_spark_sql(unique_id.split(".", 2)[-1], sql, functions)]
    assert not problems, "not Spark SQL (use the macros of macros/portable.sql):\n" + "\n".join(
        problems)


# --------------------------------------------------------------------------- the checker itself


@pytest.mark.parametrize(("sql", "construct"), [
    ("select list_contains(ranks, 1) from t", "function list_contains()"),
    ("select regexp_matches(name, 'x') from t", "function regexp_matches()"),
    ("select a from t qualify row_number() over (order by a) = 1", "QUALIFY"),
    ("select 1 as a union all by name select 2 as a", "UNION BY NAME"),
    ("select a // 2 from t", "syntax"),
])
def test_checker_names_duckdb_only_constructs(sql: str, construct: str) -> None:
    [problem] = check_spark_sql("fct_example", sql)
    assert problem.model == "fct_example" and problem.construct == construct
    assert problem.line().startswith(f"fct_example: {construct}")


def test_checker_passes_spark_sql() -> None:
    sql = ("select size(ranks), array_contains(ranks, 1), posexplode(ranks) as (pos, rank), "
           "get_json_object(args, \"$['event type']\"), (a div 2) from t")
    assert check_spark_sql("fct_example", sql) == []
