"""Seeded fuzzing of the files qkv reads: mutated config.json, safetensors headers, shard indexes and tokenizer.json,
of tiny BERT, GPT-2 and RoPE decoder checkpoints (RoPE, window and scale keys among the mutated ones).

Whatever a checkpoint folder holds, `qkv run --model` and `qkv models` answer with exit 0 or one line and exit 2:
never a traceback, an internal error, a hang on a FIFO, an escape sequence on the terminal, or a NaN in the output.
Reproduce one case with `pytest tests/cli/test_fuzz_files.py -k 'case7'`.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import struct

import pytest
from clitools import invoke
from tiny import DECODERS, FAMILIES, make_checkpoint

SEED = 20_261_201
CASES = 120
VALUES = [None, 0, -1, 1, 2, 3, 10**6, 10**12, 2**63, 1.5, float("nan"), "x", "", [], {}, [1, 2], {"a": 1}, True,
          "\x1b]0;PWNED\x07", "../../etc", "/etc/passwd", 1e308, float("inf"), float("-inf"), 10**400, -(10**400),
          {"rope_type": "dynamic", "factor": 2.0}, {"rope_type": "dynamic", "factor": float("inf")},
          {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4},
          {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": -16, "mscale": "a"},
          {"rope_type": "dynamic", "factor": 1e308}, {"rope_type": "linear", "partial_rotary_factor": 2.0},
          {"sliding_attention": 5, "full_attention": {}}, ["sliding_attention", "full_attention"]]  # fmt: skip
KEYS = ["model_type", "hidden_size", "num_attention_heads",
        "num_key_value_heads", "rope_scaling", "rope_parameters", "layer_types", "rope_theta",
        "partial_rotary_factor", "rotary_pct", "query_pre_attn_scalar", "attn_logit_softcapping", "head_dim",
        "sliding_window", "use_sliding_window", "tie_word_embeddings"]  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine")
    return {family: make_checkpoint(root / family, family) for family in (*FAMILIES, *DECODERS)}


def regular(path) -> bool:  # an earlier mutation may have made it a FIFO, a folder, or removed it
    return path.is_file() and not path.is_symlink()


def mutate_config(rng, folder):
    path = folder / "config.json"
    if not regular(path):
        return
    try:
        cfg = json.loads(path.read_text())
    except (ValueError, RecursionError):  # an earlier mutation wrote what is not JSON
        return
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*cfg, *KEYS])
        cfg[key] = rng.choice(VALUES)
    if rng.random() < 0.1:
        text = "[" * 100_000 + "]" * 100_000  # deeper than the JSON parser's recursion
    else:
        text = json.dumps(cfg, allow_nan=True)
    path.write_text(text)


def mutate_weights(rng, folder):
    path = folder / "model.safetensors"
    if not regular(path):
        return
    data = bytearray(path.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    name = rng.choice([k for k in header if k != "__metadata__"])
    kind = rng.random()
    if kind < 0.25:
        header[name]["data_offsets"] = [
            rng.choice([0, 10**9, -5, 2**62, float("-inf")]),
            rng.choice([0, 10**12, 3, float("inf"), float("nan"), 10**400, 1.5]),
        ]
    elif kind < 0.45:
        header[name]["dtype"] = rng.choice(["F8_E4M3", "I64", "BF16", "???", 7])
    elif kind < 0.65:
        header[name]["shape"] = rng.choice(
            [[10**9, 10**9], [-1], [0], "x", [2**62, 4], [float("inf")], [float("nan"), 2], [10**400], [2.5], [True]]
        )
    elif kind < 0.8:
        path.write_bytes(bytes(data[: rng.randint(0, len(data))]))  # truncated
        return
    else:
        for _ in range(rng.randint(1, 20)):  # bytes flipped in the values (NaN or inf appear)
            j = rng.randint(8 + n, len(data) - 1)
            data[j] = rng.randint(0, 255)
        path.write_bytes(bytes(data))
        return
    raw = json.dumps(header, allow_nan=True).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data[8 + n :]))


def mutate_tokenizer(rng, folder):
    path = folder / "tokenizer.json"
    if not regular(path):
        return
    tok = json.loads(path.read_text())
    kind = rng.random()
    model = tok.get("model")
    if kind < 0.4 and isinstance(model, dict) and isinstance(model.get("vocab"), dict) and model["vocab"]:
        vocab = model["vocab"]
        word = rng.choice(list(vocab))
        vocab[rng.choice(["\x1b]0;PWNED\x07\x1b[2J", "\x00", "\u202eabc", "a" * 100_000])] = vocab.pop(word)
    elif kind < 0.7:
        tok["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": rng.choice(["(", "[", "(?<=a)b", ".*" * 50])},
                                "behavior": "Isolated", "invert": False}  # fmt: skip
    else:
        tok["model"] = rng.choice([None, {}, {"type": "BPE"}, {"type": "WordLevel", "vocab": "x"}])
    path.write_text(json.dumps(tok))


def mutate_folder(rng, folder):
    kind = rng.random()
    if kind < 0.3 and regular(folder / "model.safetensors"):
        os.remove(folder / "model.safetensors")
        shard = rng.choice(["../../outside.safetensors", "/etc/passwd", "fifo.safetensors", "", "sub/none.safetensors"])
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": shard}}))
        os.mkfifo(folder / "fifo.safetensors")
    elif kind < 0.6 and regular(folder / "tokenizer.json"):
        os.remove(folder / "tokenizer.json")
        os.mkfifo(folder / "tokenizer.json")
    elif regular(folder / "config.json"):
        os.remove(folder / "config.json")
        (folder / "config.json").mkdir()


MUTATIONS = [mutate_config, mutate_weights, mutate_tokenizer, mutate_folder]


@pytest.fixture
def address_space():
    """An address-space limit of what the process maps now plus 4 GiB while a case runs: a tiny checkpoint that
    declares huge sizes must be refused from the declaration, and one that allocates what it declares would otherwise
    take the machine's memory (the out-of-memory killer, not a test failure). Restored after the case."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + 4 * 2**30, hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("index", range(CASES), ids=[f"case{i}" for i in range(CASES)])
def test_hostile_checkpoint(index, pristine, tmp_path, monkeypatch, address_space):
    rng = random.Random(SEED * 1000 + index)
    family = rng.choice(sorted(pristine))
    folder = tmp_path / "model"
    shutil.copytree(pristine[family], folder)
    for _ in range(rng.randint(1, 2)):
        rng.choice(MUTATIONS)(rng, folder)
    monkeypatch.chdir(tmp_path)
    for args in (["run", "the cat sat", "--model", folder, "--format", rng.choice(["table", "json", "csv"])],
                 ["explain", "the cat", "--model", folder], ["mask", "the cat", "--model", folder]):  # fmt: skip
        result = invoke(args)
        where = f"case {index} ({family}): qkv {[str(a) for a in args]!r}"
        assert result.exit_code in (0, 2), f"{where}: exit {result.exit_code}: {result.output[-400:]!r}"
        assert "Traceback" not in result.output and "internal error" not in result.stderr, where
        assert "\x1b" not in result.output, f"{where}: an escape sequence reached the terminal"
        assert "out of memory" not in result.stderr, f"{where}: a tiny model allocated what its files declare"
        if result.exit_code == 2:
            assert len(result.stderr.splitlines()) == 1, f"{where}: {result.stderr!r}"
        else:
            assert "nan" not in result.stdout.lower().replace("nano", ""), where
