"""Model/batch config files (model_config*.json): parsed, or refused with the reason."""

from __future__ import annotations

import json

import pytest

from tracehouse.ingest.discover import discover
from tracehouse.ingest.model_config import is_model_config_name, parse_model_config
from tracehouse.ingest.trace_types import TraceError
from tracehouse.simulate import SimConfig
from tracehouse.simulate.model_config import model_config


def test_a_simulated_config_parses_with_its_stated_flops() -> None:
    cfg = SimConfig(tp=2, pp=2, dp=2, microbatches=4, layers=4, hidden=1024, heads=8,
                    seq_length=1024)
    row = parse_model_config(json.dumps(model_config(cfg)))
    assert (row["num_layers"], row["hidden_size"], row["global_batch_size"]) == (4, 1024, 8)
    assert row["swiglu"] is False and row["params_dtype"] == "torch.bfloat16"
    assert row["config_source"] == "simulate" and row["stated_flops_per_iteration"] > 0


def test_a_flat_object_of_megatron_arguments_is_read() -> None:
    row = parse_model_config(json.dumps({
        "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 8,
        "global_batch_size": 2, "swiglu": True}))
    assert row["swiglu"] is True and row["ffn_hidden_size"] is None
    assert row["stated_flops_per_iteration"] is None


@pytest.mark.parametrize(("text", "says"), [
    ("[1, 2]", "not a JSON object"),
    ("{", "not JSON"),
    ('{"megatron_args": {"num_layers": 2}}', "megatron_args.hidden_size is missing"),
    ('{"megatron_args": {"num_layers": 0, "hidden_size": 8, "num_attention_heads": 1,'
     ' "seq_length": 8, "global_batch_size": 1}}', "num_layers is 0"),
    ('{"megatron_args": {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 1,'
     ' "seq_length": 8, "global_batch_size": 1}, "flops_per_iteration": -1}',
     "flops_per_iteration is -1"),
    ('{"megatron_args": {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 1,'
     ' "seq_length": 8, "global_batch_size": 1, "params_dtype": "fp8"}}',
     "params_dtype is 'fp8', not a dtype tracehouse knows"),
])
def test_a_bad_config_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(TraceError, match=says):
        parse_model_config(text)


@pytest.mark.parametrize(("written", "stored"), [
    ("torch.bfloat16", "torch.bfloat16"), ("bf16", "torch.bfloat16"),
    ("BFloat16", "torch.bfloat16"),
    ("fp16", "torch.float16"), ("torch.half", "torch.float16"), ("fp32", "torch.float32"),
])
def test_params_dtype_is_stored_under_the_name_the_marts_read(written: str, stored: str) -> None:
    """A hand-written `bf16` once gave the MFU mart no peak (NULL MFU, no word why)."""
    row = parse_model_config(json.dumps({
        "num_layers": 1, "hidden_size": 8, "num_attention_heads": 1, "seq_length": 8,
        "global_batch_size": 1, "params_dtype": written}))
    assert row["params_dtype"] == stored


def test_discovery_files_configs_beside_traces(tmp_path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "model_config.json").write_text("{}")
    assert is_model_config_name("model_config.json") and not is_model_config_name("config.json")
    found = discover([job])
    assert [(p.name, run) for p, run in found.model_configs] == [("model_config.json", "job")]
    assert not found.traces
