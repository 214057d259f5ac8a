"""The seed op_flop_models against the macro that reads `Concrete Inputs`.

Why: macros/op_flops.sql reads `Concrete Inputs` only at positions below
``concrete_positions()``; a seed row whose is_causal (or stride, padding, ...)
sits at or beyond it silently reads NULL, and every kernel of that op lands
as `no_causal_flag` or `bad_shapes`. That happened with cuDNN attention's
backward (is_causal at 14) on the first Hopper trace with shapes.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "seeds" / "op_flop_models.csv"
MACROS = ROOT / "macros" / "op_flops.sql"


def _concrete_positions() -> int:
    pattern = r"macro concrete_positions\(\)\s*-%\}\{\{\s*return\((\d+)\)"
    match = re.search(pattern, MACROS.read_text())
    assert match, "concrete_positions() not found in macros/op_flops.sql"
    return int(match.group(1))


def _seed_rows() -> list[dict[str, str]]:
    with SEED.open(newline="") as f:
        return list(csv.DictReader(f))


def test_every_seed_position_is_read_by_the_macro() -> None:
    limit = _concrete_positions()
    rows = _seed_rows()
    position_columns = [c for c in rows[0] if c.endswith("_input") and c != "q_input"]
    assert "causal_input" in position_columns and "stride_input" in position_columns
    beyond = [(row["op_name"], column, int(row[column])) for row in rows
              for column in position_columns if row[column] and int(row[column]) >= limit]
    assert not beyond, f"positions at or beyond concrete_positions() = {limit}: {beyond}"


def test_op_names_are_unique() -> None:
    names = [row["op_name"] for row in _seed_rows()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_cudnn_attention_has_models_in_both_directions() -> None:
    models = {row["op_name"]: row["flop_model"] for row in _seed_rows()}
    assert models["aten::_cudnn_attention_forward"] == "attention_forward"
    assert models["aten::_cudnn_attention_backward"] == "attention_backward"
