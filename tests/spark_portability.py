"""Does a model's SQL, compiled for the spark target, read as Spark SQL?

The models keep DuckDB-only spellings behind dispatched macros
(``macros/portable.sql``); this module checks the result with sqlglot, the
static half of the portability guarantee (the Spark build and its equality
with DuckDB's marts, ``tests/test_spark.py``, are the dynamic half).

sqlglot's parser is lenient: in the spark dialect it still accepts many
DuckDB constructs (an unknown function becomes an ``Anonymous`` call,
``QUALIFY`` and ``UNION BY NAME`` parse). So a compiled model must:

- parse as Spark SQL;
- call only functions Spark has (an ``Anonymous`` call must be a Spark
  built-in: pyspark's function list when pyspark is installed, else
  ``SPARK_ONLY_FUNCTIONS``);
- use none of ``DUCKDB_ONLY_SYNTAX`` (clauses sqlglot parses but Spark SQL
  lacks);
- generate back as Spark SQL with nothing sqlglot calls unsupported.

Each problem names the model and the construct, so whoever adds a model
sees which macro to use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, UnsupportedError

#: Spark SQL functions sqlglot does not model (it parses them as Anonymous):
#: the fallback when pyspark (whose function list is authoritative) is absent.
SPARK_ONLY_FUNCTIONS = frozenset({
    "arrays_overlap", "posexplode", "get_json_object", "try_element_at", "unhex",
    "decode", "instr", "size", "sequence", "listagg", "min_by", "max_by",
})


def _qualify(node: exp.Expression) -> bool:
    return isinstance(node, exp.Qualify)


def _union_by_name(node: exp.Expression) -> bool:
    return isinstance(node, exp.SetOperation) and bool(node.args.get("by_name"))


#: Constructs sqlglot parses in the spark dialect but Spark SQL lacks, with
#: the portable spelling to use instead.
DUCKDB_ONLY_SYNTAX: dict[str, tuple[Callable[[exp.Expression], bool], str]] = {
    "QUALIFY": (_qualify, "filter row_number() in an outer select (macro first_match)"),
    "UNION BY NAME": (_union_by_name, "union all with the columns in the same order"),
}


@dataclass(frozen=True)
class PortabilityProblem:
    """One construct of one model that does not translate to Spark SQL."""

    model: str
    construct: str
    detail: str

    def line(self) -> str:
        return f"{self.model}: {self.construct}: {self.detail}"


def spark_functions() -> frozenset[str]:
    """Names (lowercase) of the functions Spark SQL has, as far as can be known here."""
    try:
        from pyspark.sql import functions
    except ImportError:
        return SPARK_ONLY_FUNCTIONS
    return SPARK_ONLY_FUNCTIONS | frozenset(
        name.lower() for name in dir(functions) if not name.startswith("_"))


def check_spark_sql(model: str, sql: str,
                    functions: frozenset[str] | None = None) -> list[PortabilityProblem]:
    """Every construct of ``sql`` (one compiled model) that Spark SQL would not take."""
    known = spark_functions() if functions is None else functions
    try:
        tree = sqlglot.parse_one(sql, read="spark", error_level=ErrorLevel.RAISE)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f"line {first.get('line')}, col {first.get('col')}" if first else ""
        near = (first.get("highlight") or "").strip() if first else ""
        return [PortabilityProblem(model, "syntax", f"does not parse as Spark SQL at {where}"
                                   f"{f' near {near!r}' if near else ''}: "
                                   f"{first.get('description', exc)}")]
    problems: list[PortabilityProblem] = []
    for name in sorted({call.name.lower() for call in tree.find_all(exp.Anonymous)}):
        if name not in known:
            problems.append(PortabilityProblem(
                model, f"function {name}()", "not a Spark SQL function; use or add a "
                "dispatched macro in macros/portable.sql"))
    for construct, (matches, instead) in DUCKDB_ONLY_SYNTAX.items():
        if any(matches(node) for node in tree.walk()):
            problems.append(PortabilityProblem(model, construct,
                                               f"not Spark SQL; instead: {instead}"))
    try:
        tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as exc:
        problems.append(PortabilityProblem(model, "unsupported", str(exc).splitlines()[0]))
    return problems
