"""A damaged or hostile checkpoint is one clear error line, and nothing is ever unpickled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import assert_one_line_error, invoke

# ---- checkpoints ----------------------------------------------------------------------------------------

GPT2_CONFIG = {"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 50, "n_positions": 16}


def gpt2_tensors(d=8, vocab=50, positions=16, layers=1):
    """A tiny GPT-2 checkpoint's tensors, named and shaped as Hugging Face saves them."""
    import numpy as np

    rng = np.random.default_rng(0)
    shapes = {"wte.weight": (vocab, d), "wpe.weight": (positions, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    per_layer = {"ln_1.weight": (d,), "ln_1.bias": (d,), "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
                 "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
                 "mlp.c_fc.weight": (d, 4 * d), "mlp.c_fc.bias": (4 * d,), "mlp.c_proj.weight": (4 * d, d),
                 "mlp.c_proj.bias": (d,)}  # fmt: skip
    for layer in range(layers):
        shapes.update({f"h.{layer}.{name}": shape for name, shape in per_layer.items()})
    return {name: (0.1 * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}


def write_checkpoint(folder: Path, tensors=None, config=None) -> Path:
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(GPT2_CONFIG if config is None else config))
    save_file(gpt2_tensors() if tensors is None else tensors, str(folder / "model.safetensors"))
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(49)} | {"[UNK]": 49}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def corrupt_config_truncated(folder):
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])


def corrupt_config_not_object(folder):
    (folder / "config.json").write_text("[]")


def corrupt_config_missing_key(folder):
    (folder / "config.json").write_text(json.dumps({k: v for k, v in GPT2_CONFIG.items() if k != "n_embd"}))


def corrupt_config_family(folder):
    (folder / "config.json").write_text(json.dumps(GPT2_CONFIG | {"model_type": "mamba"}))


def corrupt_config_heads(folder):
    (folder / "config.json").write_text(json.dumps(GPT2_CONFIG | {"n_head": 3}))


def corrupt_weights_truncated(folder):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def corrupt_weights_garbage(folder):
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)


def corrupt_weights_empty(folder):
    (folder / "model.safetensors").write_bytes(b"")


def corrupt_no_weights(folder):
    (folder / "model.safetensors").unlink()


def corrupt_pickle_only(folder):
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04cos\nsystem\n")  # must never be unpickled


def corrupt_no_tokenizer(folder):
    (folder / "tokenizer.json").unlink()


def corrupt_shape(folder):
    from safetensors.numpy import save_file

    tensors = gpt2_tensors()
    tensors["h.0.attn.c_proj.weight"] = tensors["h.0.attn.c_proj.weight"][:, :7].copy()
    save_file(tensors, str(folder / "model.safetensors"))


def corrupt_non_finite(folder):
    import numpy as np
    from safetensors.numpy import save_file

    tensors = gpt2_tensors()
    tensors["h.0.attn.c_attn.weight"][0, :2] = [np.nan, np.inf]
    save_file(tensors, str(folder / "model.safetensors"))


def corrupt_missing_tensor(folder):
    from safetensors.numpy import save_file

    tensors = gpt2_tensors()
    del tensors["h.0.mlp.c_fc.bias"]
    save_file(tensors, str(folder / "model.safetensors"))


CHECKPOINTS = [
    (corrupt_config_truncated, ["config.json", "not valid JSON"]),
    (corrupt_config_not_object, ["config.json", "JSON object"]),
    (corrupt_config_missing_key, ["config.json", "missing the key 'n_embd'"]),
    (corrupt_config_family, ["'mamba'", "supported are bert, gpt2"]),
    (corrupt_config_heads, ["d (8)", "divisible", "heads (3)"]),
    (corrupt_weights_truncated, ["model.safetensors", "truncated or corrupt"]),
    (corrupt_weights_garbage, ["model.safetensors", "truncated or corrupt"]),
    (corrupt_weights_empty, ["model.safetensors", "truncated or corrupt"]),
    (corrupt_no_weights, ["no model.safetensors", "config.json, model.safetensors, tokenizer.json"]),
    (corrupt_pickle_only, ["pytorch_model.bin", "never unpickles"]),
    (corrupt_no_tokenizer, ["no tokenizer.json", "config.json, model.safetensors, tokenizer.json"]),
    (corrupt_shape, ["'h.0.attn.c_proj.weight'", "(8, 7)", "expected (8, 8)"]),
    (corrupt_non_finite, ["'h.0.attn.c_attn.weight'", "2 non-finite"]),
    (corrupt_missing_tensor, ["h.0.mlp.c_fc.bias", "does not match its config.json"]),
]


@pytest.mark.parametrize(
    "corrupt,fragments", CHECKPOINTS, ids=[c.__name__.removeprefix("corrupt_") for c, _ in CHECKPOINTS]
)
def test_checkpoints(corrupt, fragments, tmp_path, monkeypatch):
    folder = write_checkpoint(tmp_path / "tiny")
    corrupt(folder)
    monkeypatch.setattr("pickle.loads", lambda *a, **k: pytest.fail("something unpickled"))
    monkeypatch.setattr("pickle.load", lambda *a, **k: pytest.fail("something unpickled"))
    assert_one_line_error(invoke(["run", "w1 w2 w3", "--model", folder]), *fragments)


def test_the_tiny_checkpoint_itself_loads(tmp_path):
    """The fixture is valid: each failure above comes from the one corruption, not from the fixture."""
    from qkv_cli.models import load_model

    model = load_model(write_checkpoint(tmp_path / "tiny"))
    assert model.config.d == 8 and model.config.n_heads == 2
