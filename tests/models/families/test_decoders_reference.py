"""Every RoPE decoder family against transformers: tiny random models built and saved by transformers in the test.

float32 against its eager attention within 1e-5; float64 within 1e-10 against the same weights in a model that
transformers runs in float64 throughout (decoders.float64_everywhere: transformers computes RoPE frequencies,
RMSNorm and the eager softmax in float32 even after model.double()).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from decoders import CASES, attentions, float64_everywhere, float64_twin, ids_for, last_hidden
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.models import load_model

pytestmark = pytest.mark.reference
LENGTHS = (1, 7, 19)  # windows are 4-6 tokens: the longer texts cross them


@pytest.mark.parametrize("name", list(CASES))
def test_float32_attention_matches_transformers_eager(name, built, torch):
    folder, model = built(name)
    ours = load_model(folder, dtype="float32")
    for m in LENGTHS:
        ids = ids_for(m, m)
        ref = attentions(torch, model, ids)
        run = ours.forward(ids)
        assert run.attentions.dtype == np.float32
        for layer, want in enumerate(ref):
            np.testing.assert_allclose(run.attentions[layer], want, atol=1e-5, rtol=0, err_msg=f"{name} layer {layer}")
        hidden = last_hidden(torch, model, ids)
        np.testing.assert_allclose(run.last_hidden_state, hidden, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("name", list(CASES))
def test_float64_attention_matches_a_float64_transformers(name, built, torch, transformers):
    folder, model = built(name)
    ours = load_model(folder, dtype="float64")
    ids = ids_for(LENGTHS[-1], 1)
    with float64_everywhere(torch):
        twin = float64_twin(transformers, torch, model)
        ref = attentions(torch, twin, ids)
        hidden = last_hidden(torch, twin, ids)
    run = ours.forward(ids)
    for layer, want in enumerate(ref):
        assert want.dtype == np.float64
        np.testing.assert_allclose(run.attentions[layer], want, atol=1e-10, rtol=0, err_msg=f"{name} layer {layer}")
    np.testing.assert_allclose(run.last_hidden_state, hidden, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("name", ["smollm3", "smollm3-list", "phi3", "phi3-longrope"])
def test_float64_logits_match_a_float64_transformers(name, built, torch, transformers):
    """Logits and every layer's attention to 1e-10 in float64, at a length within Phi-3's original context (LongRoPE's
    short factors) and one beyond it (its long factors)."""
    folder, model = built(name)
    ours = load_model(folder, dtype="float64")
    for m in (7, 19):
        ids = ids_for(m, m + 2)
        with float64_everywhere(torch):
            twin = float64_twin(transformers, torch, model)
            with torch.no_grad():
                ref = twin(torch.tensor([ids]), output_attentions=True)
        run = ours.forward(ids)
        for layer, want in enumerate(ref.attentions):
            np.testing.assert_allclose(run.attentions[layer], want[0].numpy(), atol=1e-10, rtol=0, err_msg=f"{layer}")
        z = ours.family.logits(ours.params, ours.config, run.last_hidden_state)
        np.testing.assert_allclose(z, ref.logits[0].numpy(), atol=1e-10, rtol=0)


def test_phi3_fused_projections_partial_rotary_and_longrope(built):
    """qkv_proj and gate_up_proj read as [Q | K | V] and [W_gate | W_up]; only the first 3/4 of a head turns; the
    text beyond original_max_position_embeddings (8) turns by the long factors, and both scale cos and sin."""
    import math

    from safetensors.numpy import load_file

    from qkv_cli.models.layers.rope import inv_freq

    folder, model = built("phi3-longrope")
    ours = load_model(folder, dtype="float64")
    c = ours.config
    r = c.rope.of("", 0)
    assert (r.kind, r.rot, c.d_k) == ("longrope", 6, 8)
    stored = load_file(folder / "model.safetensors")
    W = stored["model.layers.0.self_attn.qkv_proj.weight"]
    blk = ours.params.blocks[0]
    np.testing.assert_array_equal(blk.attn.qkv.W, W)
    gate_up = stored["model.layers.0.mlp.gate_up_proj.weight"]
    np.testing.assert_array_equal(blk.gate.W, gate_up[: c.d_ff])
    np.testing.assert_array_equal(blk.up.W, gate_up[c.d_ff :])
    base = 1 / (200.0 ** (np.arange(0, 6, 2) / 6))
    scaling = math.sqrt(1 + math.log(32 / 8) / math.log(8))  # factor = max / original positions
    for m, factors in ((8, (1.0, 1.3, 2.0)), (9, (1.5, 4.0, 9.0))):
        freq, s = inv_freq(r, m)
        np.testing.assert_allclose(freq, base / np.array(factors), rtol=1e-14)
        assert s == pytest.approx(scaling, rel=1e-14)
    det = ours.forward(ids_for(11, 4), layers="all").layers[1]
    np.testing.assert_array_equal(det.Q[..., 6:], det.Q_pre_rope[..., 6:])
    assert not np.allclose(det.Q[:, 5, :6], det.Q_pre_rope[:, 5, :6])
    r = CliRunner().invoke(app, ["shapes", "--model", str(folder), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["rotary_dims"], doc["longrope_switch"], doc["total_parameters"]) == (6, 8, doc["file_parameters"])


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}},
         "RoPE type 'linear' is not one this family uses: default, longrope"),
        ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 100.0, "short_factor": [1.0],
                              "partial_rotary_factor": 0.75,
                              "long_factor": [1.0, 2.0, 3.0], "original_max_position_embeddings": 8}},
         "short_factor must list 3 positive numbers"),
        ({"sliding_window": 0}, "'sliding_window' must be at least 1"),
    ],
)  # fmt: skip
def test_bad_phi3_keys_are_one_line_exit_2_before_weights(changes, fragment, built, tmp_path):
    folder, _ = built("phi3-longrope")
    bad = tmp_path / "bad"
    bad.mkdir()
    raw = json.loads((folder / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(raw | changes))
    (bad / "model.safetensors").write_bytes(b"not read")
    (bad / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(bad)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_phi3_old_rope_names_are_longrope(built, tmp_path):
    """Older Phi-3 files write LongRoPE as rope_scaling {"type": "su"} beside rope_theta: the same model."""
    folder, _ = built("phi3-longrope")
    raw = json.loads((folder / "config.json").read_text())
    params = raw.pop("rope_parameters")
    old = {"type": "su", "short_factor": params["short_factor"], "long_factor": params["long_factor"]}
    raw |= {"rope_scaling": old, "rope_theta": params["rope_theta"], "partial_rotary_factor": 0.75}
    copy = tmp_path / "old"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "config.json").write_text(json.dumps(raw))
    ids = ids_for(19, 6)
    np.testing.assert_array_equal(load_model(copy).forward(ids).attentions, load_model(folder).forward(ids).attentions)


@pytest.mark.parametrize("name", ["mistral", "qwen2", "gemma2", "gemma3_text", "smollm3", "phi3", "mixtral",
                                  "qwen3_moe-sliding"])  # fmt: skip
def test_sliding_layers_keep_only_the_window(name, built):
    folder, _ = built(name)
    model = load_model(folder, dtype="float64")
    run = model.forward(ids_for(19, 3), layers="all")
    window = model.config.attention.sliding_window
    i, t = np.indices((19, 19))
    outside = (i - t >= window) | (t > i)
    kinds = set()
    for layer, kind in enumerate(run.layer_types):
        kinds.add(kind)
        w = run.attentions[layer]
        assert (w[:, t > i] == 0).all()  # causal everywhere
        if kind == "sliding_attention":
            assert (w[:, outside] == 0).all() and run.layers[layer].model.window == window
        else:
            assert (w[:, (i - t >= window) & (t <= i)] > 0).any()  # a global layer reaches past the window
    every = ("mistral", "phi3", "mixtral", "qwen3_moe-sliding")  # every layer slides (Qwen3-MoE: no max_window_layers)
    assert kinds == {"sliding_attention", "full_attention"} or (name in every and kinds == {"sliding_attention"})


@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt_neox", "gemma3_text"])
def test_layer_detail_rope_step_and_kernels(name, built):
    folder, _ = built(name)
    model = load_model(folder, dtype="float64")
    c = model.config
    ids = ids_for(11, 5)
    run = model.forward(ids, layers="all")
    for det in run.layers.values():
        assert det.Q.shape == (c.n_heads, 11, c.d_k) and det.K.shape == (c.n_kv_heads, 11, c.d_k)
        rot = det.Q.shape[-1] if name != "gpt_neox" else int(c.d_k * 0.25)
        np.testing.assert_array_equal(det.Q[..., rot:], det.Q_pre_rope[..., rot:])  # only the rotary part turns
        np.testing.assert_allclose(det.Q[:, 0], det.Q_pre_rope[:, 0], atol=1e-12)  # position 0: angle 0
        assert not np.allclose(det.Q[:, 5, :rot], det.Q_pre_rope[:, 5, :rot])
        np.testing.assert_allclose(
            np.linalg.norm(det.Q[..., :rot], axis=-1), np.linalg.norm(det.Q_pre_rope[..., :rot], axis=-1), rtol=1e-12
        )  # a rotation
    for kernel in ("loop", "reference"):
        np.testing.assert_allclose(model.forward(ids, kernel=kernel).attentions, run.attentions, atol=1e-12)


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma2", "gpt_neox", "olmo2"])
def test_cli_json_equals_transformers(name, built, torch):
    folder, model = built(name)
    text = "the cat sat on the mat because it was warm"
    r = CliRunner().invoke(app, ["run", text, "--model", str(folder), "--format", "json", "--dtype", "float32"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    ref = attentions(torch, model, load_model(folder).tokenize(text).ids)
    np.testing.assert_allclose(np.array(doc["attentions"]), np.stack(ref), atol=1e-5)
    assert doc["settings"]["family"] == model.config.model_type
    assert len(doc["layer_types"]) == model.config.num_hidden_layers


def test_every_rope_family_in_the_registry_has_a_case():
    from qkv_cli.models import FAMILIES
    from qkv_cli.models.families.registry import encoder_decoders

    assert {model_type for model_type, _ in CASES.values()} == set(FAMILIES) - {"bert", "gpt2"} - encoder_decoders()


@pytest.mark.parametrize(
    "name", ["qwen3", "olmo2", "gemma2", "gpt_neox", "llama-yarn", "deepseek_v3", "deepseek_v3-yarn", "gpt_oss"]
)
def test_explain_recomputes_the_run(name, built):
    """explain redoes QK-norm, RoPE and soft-capping with the plain formulas: the same Q, K and weights as run."""
    folder, _ = built(name)
    text, head = "the cat sat on the mat because it was warm", 1
    common = [text, "--model", str(folder), "--layer", "1", "--format", "json"]
    run = json.loads(CliRunner().invoke(app, ["run", *common, "--show", "q,k,weights", "--head", str(head)]).stdout)
    r = CliRunner().invoke(app, ["explain", *common, "--head", str(head), "--query", "5"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    layer = run["layers"]["1"]
    np.testing.assert_allclose(doc["steps"]["Q"]["matrix"], layer["Q"][0], atol=1e-9)
    np.testing.assert_allclose(doc["steps"]["K"]["matrix"], layer["K"][doc["kv_head"]], atol=1e-9)
    np.testing.assert_allclose(doc["steps"]["weights"]["matrix"], layer["weights"][0], atol=1e-9)
    rope = doc["query"]["rope"]
    np.testing.assert_allclose(rope["angle"], 5 * np.array(rope["theta"]))
    assert ("Q_projected" in doc["steps"]) == (name in ("qwen3", "olmo2"))
    assert ("scores_uncapped" in doc["steps"]) == (name == "gemma2")


def test_untied_output_head_is_read_once_on_first_use_not_ahead(built, monkeypatch):
    """load_model reads only the final norm; the forward pass reads each layer's tensors once (they stay when the
    budget allows) and the embedding by rows; the head is read when first needed and kept (not re-read, cast and
    checked on every call); the logits use the file's lm_head."""
    from qkv_cli.models.formats.safetensors import Tensors

    folder, _ = built("llama")  # tie_word_embeddings False: lm_head.weight of its own
    reads = []
    original = Tensors._read
    monkeypatch.setattr(Tensors, "_read", lambda self, key: reads.append(key) or original(self, key))
    model = load_model(folder, dtype="float64")
    assert reads == ["norm.weight"]
    ids = ids_for(7, 3)
    out = model.forward(ids)
    model.forward(ids)  # a layer read a second time stays resident: a third pass reads nothing
    before = len(reads)
    model.forward(ids)
    assert len(reads) == before and "__head__" not in reads and "embed_tokens.weight" not in reads
    assert all(reads.count(r) <= 2 for r in reads) and len(set(reads)) > 10
    z1 = model.family.logits(model.params, model.config, out.last_hidden_state)
    z2 = model.family.logits(model.params, model.config, out.last_hidden_state)
    assert reads.count("__head__") == 1 and z1 is not z2
    from safetensors.numpy import load_file

    head = load_file(folder / "model.safetensors")["lm_head.weight"].astype(np.float64)  # the file's own matrix
    np.testing.assert_allclose(z1, out.last_hidden_state @ head.T, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(z1, z2)


def test_smollm3_nope_layers_turn_nothing_and_say_so(built):
    """SmolLM3's NoPE layers (every 2nd here): Q and K unrotated (no pre-RoPE copy), named in the header and shapes;
    the RoPE layers turn as usual."""
    folder, model = built("smollm3")
    ours = load_model(folder, dtype="float64")
    assert ours.config.rope.no_rope == (1, 3) == tuple(i for i, v in enumerate(model.config.no_rope_layers) if not v)
    run = ours.forward(ids_for(11, 2), layers="all")
    for layer, det in run.layers.items():
        assert (det.Q_pre_rope is None) == (layer in (1, 3)) and det.model.rope is (layer not in (1, 3))
    text = "the cat sat on the mat because it was warm"
    r = CliRunner().invoke(app, ["run", text, "--model", str(folder), "--layer", "3", "--head", "0"])
    assert r.exit_code == 0, r.output
    assert "layer 3 of 0..3 (sliding_attention) no RoPE" in r.output
    r = CliRunner().invoke(app, ["shapes", "--model", str(folder), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["nope_layers"] == [1, 3]


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"no_rope_layers": [1, 0, 1, 1, 0]}, "'no_rope_layers' lists 5 layers but the model has 3"),
        ({"no_rope_layers": [1, 2, 1]}, "'no_rope_layers' must list 1 (RoPE) or 0"),
        ({"no_rope_layers": None, "no_rope_layer_interval": 0}, "'no_rope_layer_interval' must be at least 1"),
    ],
)
def test_bad_nope_keys_are_one_line_exit_2_before_weights(changes, fragment, built, tmp_path):
    folder, _ = built("smollm3-list")
    bad = tmp_path / "bad"
    bad.mkdir()
    raw = json.loads((folder / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(raw | changes))
    (bad / "model.safetensors").write_bytes(b"not read")  # refused before the weights are opened
    (bad / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(bad)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_smollm3_default_rope_base_is_transformers(built, tmp_path, transformers):
    """A SmolLM3 config.json without a RoPE base: SmolLM3Config's default_theta (2e6), not Llama's 10000."""
    from qkv_cli.models.families.registry import read_config

    folder, _ = built("smollm3-list")
    raw = json.loads((folder / "config.json").read_text())
    raw.pop("rope_parameters", None)
    raw.pop("rope_theta", None)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    want = transformers.AutoConfig.from_pretrained(tmp_path).rope_parameters["rope_theta"]
    assert read_config(tmp_path).rope.ropes[""].theta == want == 2_000_000.0
