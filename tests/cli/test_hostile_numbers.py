"""Hostile numbers in a checkpoint's files: JSON's non-finite numbers (Infinity, NaN), integers too large for any
size, fractional sizes, zero or negative widths. Each is one line and exit 2, never an OverflowError or a
ZeroDivisionError (exit 1)."""

from __future__ import annotations

import json
import struct

import pytest
from clitools import assert_one_line_error, invoke
from tiny import make_checkpoint

from qkv_cli.errors import QkvError
from qkv_cli.models.layers.rope import Rope


def rewrite_header(path, edit):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    edit(header[name])
    raw = json.dumps(header, allow_nan=True).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])


EDITS = {
    "shape Infinity": lambda t: t.update(shape=[float("inf")]),
    "shape NaN": lambda t: t.update(shape=[float("nan"), 2]),
    "shape 1.5": lambda t: t.update(shape=[1.5]),
    "shape 10**400": lambda t: t.update(shape=[10**400]),
    "shape true": lambda t: t.update(shape=[True]),
    "offsets Infinity": lambda t: t.update(data_offsets=[0, float("inf")]),
    "offsets -Infinity": lambda t: t.update(data_offsets=[float("-inf"), 0]),
    "offsets 10**400": lambda t: t.update(data_offsets=[0, 10**400]),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_safetensors_header_numbers(edit, tmp_path):
    folder = make_checkpoint(tmp_path / "m", "gpt2")
    rewrite_header(folder / "model.safetensors", EDITS[edit])
    assert_one_line_error(invoke(["run", "the cat", "--model", folder]), "model.safetensors")


def test_dynamic_rope_over_a_head_of_two(tmp_path):
    """Dynamic NTK scaling grows the base by a power rot / (rot - 2): a rotated width of 2 has none."""
    over = {"num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 2,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}  # fmt: skip
    folder = make_checkpoint(tmp_path / "m", "llama", config_overrides=over)
    assert_one_line_error(invoke(["run", "the cat sat on the mat", "--model", folder]), "dynamic", "2")
    with pytest.raises(QkvError, match="dynamic"):
        Rope(theta=10000.0, rot=2, kind="dynamic", factor=2.0, max_positions=2)
    Rope(theta=10000.0, rot=4, kind="dynamic", factor=2.0, max_positions=2)  # 4 is fine


VALUES = {"inf": float("inf"), "nan": float("nan"), "10**400": 10**400, "0": 0, "-4": -4, "2.5": 2.5}


@pytest.mark.parametrize("value", VALUES, ids=list(VALUES))
@pytest.mark.parametrize("key", ["head_dim", "num_attention_heads", "hidden_size", "rope_theta"])
def test_config_numbers(key, value, tmp_path):
    if key == "rope_theta" and value == "2.5":
        return  # a base above 1 is a base
    value = VALUES[value]
    folder = make_checkpoint(tmp_path / "m", "llama")
    cfg = json.loads((folder / "config.json").read_text())
    cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg, allow_nan=True))
    r = invoke(["run", "the cat", "--model", folder])
    assert r.exit_code == 2, (key, value, r.output)
    assert len(r.stderr.splitlines()) == 1 and "internal error" not in r.stderr


SCALING = {"factor": 2.0, "original_max_position_embeddings": 8, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-4"])
@pytest.mark.parametrize("key", [*SCALING, "beta_fast", "attention_factor"])
@pytest.mark.parametrize("kind", ["dynamic", "yarn", "llama3", "linear"])
def test_rope_scaling_numbers(kind, key, value, tmp_path):
    """Every number of rope_scaling, hostile, under every kind: a run or one line, exit 2; never exit 1."""
    folder = make_checkpoint(tmp_path / "m", "llama")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": kind, **SCALING, key: VALUES[value]}
    (folder / "config.json").write_text(json.dumps(cfg, allow_nan=True))
    r = invoke(["run", "the cat sat on the mat", "--model", folder])
    assert r.exit_code in (0, 2) and "internal error" not in r.stderr, (kind, key, value, r.output)
    assert r.exit_code == 0 or len(r.stderr.splitlines()) == 1
