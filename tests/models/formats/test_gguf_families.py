"""GGUF files of llama.cpp's architectures against transformers on the same weights.

Each tiny random model of support/decoders.py is written to GGUF by support/gguf_convert.py, a small converter that
follows llama.cpp's convert_hf_to_gguf.py, not qkv's code (the metadata each model class writes, gguf-py's tensor
names, the rows of a `llama` file's attn_q and attn_k permuted to pairs, Gemma's norms stored as 1 + w, GPT-NeoX's
fused attn_qkv regrouped, F32 or F16). What llama.cpp never writes (query_pre_attn_scalar, a Mistral or Qwen
window, which Gemma 3 layers slide) is set in the model first to what llama.cpp assumes, so the file holds the whole
model. qkv loads the file; every layer's attention must equal transformers' eager attention within 1e-5 in float32
(1e-10 in float64), and the final hidden state and the logits must agree too. A llama3 RoPE (Llama 3.1) is stored
as llama.cpp stores it, per-pair factors in rope_freqs, which qkv applies as llama.cpp does.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from decoders import attentions, build, float64_everywhere, float64_twin, ids_for, reference_routing
from gguf_convert import as_stored, convert, expressible, permute
from helpers import reference_import

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.models.families.registry import config_from_dict
from qkv_cli.models.formats.gguf.mapping import config_dict

pytestmark = pytest.mark.reference
LENGTHS = (1, 7, 19)
# case -> (support/decoders.py case, F16 weights, write rope.freq_base); GPTNeoXModel writes no rope.freq_base, which
# llama.cpp then reads as 10000: the case with rotary_emb_base 200 adds the key (llama.cpp reads it for every
# architecture), the sequential one (base 10000) is the converter's output exactly
CASES = {
    "gpt_neox": ("gpt_neox", False, True),
    "gpt_neox-sequential": ("gpt_neox-sequential", False, False),
    "olmo2": ("olmo2", False, False),
    "llama": ("llama", False, False),
    "llama-tied-bias": ("llama-tied-bias", False, False),
    "llama-linear": ("llama-linear", False, False),
    "llama-yarn": ("llama-yarn", False, False),
    "llama-llama3": ("llama-llama3", False, False),
    "mistral": ("mistral", False, False),
    "qwen2": ("qwen2", False, False),
    "qwen3": ("qwen3", False, False),
    "gemma2": ("gemma2", False, False),
    "gemma3": ("gemma3_text", False, False),
    "mixtral": ("mixtral", False, False),  # mixtures of experts: llama with experts, qwen3moe, olmoe
    "qwen3_moe": ("qwen3_moe", False, False),
    "olmoe": ("olmoe", False, False),
    "smollm3": ("smollm3", False, False),  # llama's layout, NoPE every 4th layer by llama.cpp's fixed rule
    "gpt_neox-f16": ("gpt_neox-sequential", True, False),
    "olmo2-f16": ("olmo2", True, False),
    "llama-tied-bias-f16": ("llama-tied-bias", True, False),
    "gemma2-f16": ("gemma2", True, False),
    "gemma3-f16": ("gemma3_text", True, False),
    "mixtral-f16": ("mixtral", True, False),  # F16 expert stacks: each expert's rows dequantized alone
}
F32_CASES = [case for case, (_, f16, _) in CASES.items() if not f16]


@pytest.fixture(scope="module")
def libs():
    torch = reference_import("torch")
    return torch, reference_import("transformers"), reference_import("gguf")


@pytest.fixture(scope="module")
def made(libs, tmp_path_factory):
    """case -> (GGUF path, the transformers model the file holds, weights as read back: see as_stored), built once."""
    torch, transformers, gguf = libs
    models, out = {}, {}

    def get(case):
        if case not in out:
            name, f16, freq_base = CASES[case]
            if name not in models:
                model = build(transformers, torch, name, tmp_path_factory.mktemp(name))
                models[name] = expressible(transformers, torch, model)
            path = tmp_path_factory.mktemp("gguf") / f"{case}.gguf"
            halves = convert(gguf, models[name], path, f16, freq_base)
            out[case] = (path, as_stored(torch, models[name], halves))
        return out[case]

    return get


def turning_as_the_file(torch, twin, path) -> None:
    """A float64 llama3 twin turned by the file's factors: rope_freqs holds them in float32 (8 digits), which moves
    float64 attention by ~6e-7 from transformers' exact llama3 frequencies, far above 1e-10 (float32, at 1e-5, does
    not see it: its frequencies are bit for bit transformers'). So theta_k = transformers' default 1 / base^(2k/rot)
    (float64), divided by the file's factor_k: what llama.cpp computes, in float64."""
    from qkv_cli.models.formats.gguf.reader import read_gguf

    factors = read_gguf(path).tensors["rope_freqs.weight"].read().astype(np.float64)
    rotary = twin.model.rotary_emb
    default, _ = rotary.compute_default_rope_parameters(twin.config)  # float64 inside float64_everywhere
    assert default.dtype == torch.float64 and default.shape == factors.shape
    rotary.inv_freq = default / torch.from_numpy(factors)


def logits_of(ours, run):
    return ours.family.logits(ours.params, ours.config, run.last_hidden_state)


@pytest.mark.parametrize("case", list(CASES))
def test_float32_attention_hidden_state_and_logits_match_transformers(case, made, libs):
    torch = libs[0]
    path, model = made(case)
    ours = load_model(path, dtype="float32")
    for m in LENGTHS:
        ids = ids_for(m, m)
        run = ours.forward(ids)
        ref = attentions(torch, model, ids)
        assert run.attentions.dtype == np.float32 and len(ref) == len(run.attentions) == model.config.num_hidden_layers
        for layer, want in enumerate(ref):
            np.testing.assert_allclose(run.attentions[layer], want, atol=1e-5, rtol=0, err_msg=f"{case} layer {layer}")
        with torch.no_grad():
            hidden = model.base_model(torch.tensor([ids])).last_hidden_state[0].numpy()
            logits = model(torch.tensor([ids])).logits[0].numpy()
        np.testing.assert_allclose(run.last_hidden_state, hidden, atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(logits_of(ours, run), logits, atol=5e-4, rtol=1e-4)


@pytest.mark.parametrize("case", F32_CASES)
def test_float64_attention_matches_a_float64_transformers(case, made, libs):
    torch, transformers, _ = libs
    path, model = made(case)
    ours = load_model(path, dtype="float64")
    ids = ids_for(LENGTHS[-1], 1)
    with float64_everywhere(torch):
        twin = float64_twin(transformers, torch, model)
        if case == "llama-llama3":
            turning_as_the_file(torch, twin, path)
        ref = attentions(torch, twin, ids)
        with torch.no_grad():
            out = twin(torch.tensor([ids]), output_hidden_states=True)
    run = ours.forward(ids)
    for layer, want in enumerate(ref):
        assert want.dtype == np.float64
        np.testing.assert_allclose(run.attentions[layer], want, atol=1e-10, rtol=0, err_msg=f"{case} layer {layer}")
    np.testing.assert_allclose(run.last_hidden_state, out.hidden_states[-1][0].numpy(), atol=1e-9, rtol=1e-9)
    np.testing.assert_allclose(logits_of(ours, run), out.logits[0].numpy(), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("case", list(CASES))
def test_the_config_read_from_the_metadata(case, made):
    path, model = made(case)
    c, h = load_model(path).config, model.config
    kind = h.model_type
    assert (c.family, c.n_layers, c.n_heads, c.d, c.d_ff, c.vocab_size) == (
        kind, h.num_hidden_layers, h.num_attention_heads, 32, 48, h.vocab_size)  # fmt: skip
    rope = c.rope.ropes[""]
    assert c.embeddings.tied is (kind == "gemma2" or h.tie_word_embeddings)  # Gemma2Model drops lm_head
    assert c.max_positions == h.max_position_embeddings
    caps = (getattr(h, "attn_logit_softcapping", None), getattr(h, "final_logit_softcapping", None))
    assert (c.attention.softcap, c.embeddings.final_softcap) == caps
    if kind == "gpt_neox":
        assert rope.rot == model.gpt_neox.layers[0].attention.rotary_ndims == 4  # rope.dimension_count, exactly
        assert rope.theta == h.rope_parameters["rope_theta"]  # 200 from rope.freq_base, or llama.cpp's 10000
        assert c.mlp.parallel_residual is h.use_parallel_residual and c.attention.qkv_bias and c.n_kv_heads == 2
        assert c.norm_eps == float(np.float32(h.layer_norm_eps))  # GGUF stores it as float32
        assert c.norms.kind == "layer" and c.activation == h.hidden_act
        return
    full = h.rope_parameters.get("full_attention", h.rope_parameters)
    kind_read = {"llama3": "default"}.get(full["rope_type"], full["rope_type"])  # llama3: rope_freqs, no key
    assert (rope.rot, rope.theta, rope.kind, c.n_kv_heads) == (c.d_k, full["rope_theta"], kind_read, 2)
    assert (rope.freq_factors is not None) is (full["rope_type"] == "llama3")
    assert c.d_k == (getattr(h, "head_dim", None) or 8)
    assert c.attention.scale == c.d_k**-0.5  # Gemma below 27B: 1/sqrt(head_dim), as llama.cpp
    types = tuple(getattr(h, "layer_types", None) or ["full_attention"] * h.num_hidden_layers)
    window = h.sliding_window if "sliding_attention" in types else None
    assert (c.attention.layer_types, c.attention.sliding_window) == (types, window)
    assert c.norm_eps == float(np.float32(h.rms_norm_eps))
    bias, mlp_bias = getattr(h, "attention_bias", False), getattr(h, "mlp_bias", False)
    assert c.attention.qkv_bias is (kind == "qwen2" or bias) and c.mlp.bias is mlp_bias
    assert c.attention.qk_norm == {"olmo2": "flat", "qwen3": "head", "gemma3_text": "head", "qwen3_moe": "head",
                                   "olmoe": "flat"}.get(kind)  # fmt: skip
    if kind == "gemma3_text":  # the sliding layers' base from rope.freq_base_swa, unscaled
        local = c.rope.ropes["sliding_attention"]
        assert (local.theta, local.kind, rope.factor) == (300.0, "default", 2.0)


@pytest.mark.parametrize("case", ["mixtral", "qwen3_moe", "olmoe"])
def test_moe_routing_read_from_stacked_experts_equals_transformers(case, made, libs):
    """Each expert read back alone from its layer's stack (ffn_*_exps): the router's choices and weights are
    transformers', layer by layer."""
    path, model = made(case)
    ours = load_model(path, dtype="float32")
    ids = ids_for(15, 4)
    want, run = reference_routing(libs[0], model, ids), ours.forward(ids)
    assert sorted(want) == list(range(model.config.num_hidden_layers))  # llama.cpp: experts in every layer
    for layer, (top, g) in want.items():
        np.testing.assert_array_equal(run.router_top[layer], top, err_msg=f"{case} layer {layer}")
        np.testing.assert_allclose(run.router_weights[layer], g, atol=1e-5, rtol=0)


def test_without_rope_freq_base_gpt_neox_turns_at_llama_cpps_10000(made, tmp_path, libs):
    """GPTNeoXModel leaves rotary_emb_base out: llama.cpp then turns at 10000, and so does qkv (not transformers)."""
    _, model = made("gpt_neox")
    convert(libs[2], model, tmp_path / "no-base.gguf", False, False)
    ours = load_model(tmp_path / "no-base.gguf")
    assert ours.config.rope.ropes[""].theta == 10000.0 != model.config.rope_parameters["rope_theta"]


def test_llama3_scaling_is_read_from_rope_freqs_and_matters(made, libs):
    """The file holds Llama 3.1's scaling only as rope_freqs (F32, one factor per pair, no scaling key); default
    theta_k divided by those factors is transformers' llama3 theta_k; and the scaling matters on this text (longer
    than original_max_position_embeddings 8): run without it, the attention is far from transformers' with it."""
    from qkv_cli.models.formats.gguf.reader import read_gguf

    torch, transformers, _ = libs
    path, model = made("llama-llama3")
    g = read_gguf(path)
    t = g.tensors["rope_freqs.weight"]
    assert (t.kind, t.shape) == ("F32", (4,)) and not [key for key in g.metadata if "rope.scaling" in key]
    factors = t.read().astype(np.float64)
    default = 1.0 / 100.0 ** (np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(default / factors, model.model.rotary_emb.inv_freq.numpy(), rtol=1e-6)
    assert factors[0] not in (1.0, 8.0) and list(factors[1:]) == [8.0] * 3  # pair 0 on the smooth ramp
    ours = load_model(path, dtype="float32")
    assert ours.config.rope.ropes[""].freq_factors == tuple(factors)
    c = copy.deepcopy(model.config)
    c.rope_parameters = {"rope_type": "default", "rope_theta": 100.0}
    del c.original_max_position_embeddings  # (expressible's)
    unscaled = transformers.AutoModelForCausalLM.from_config(c, attn_implementation="eager")
    unscaled.load_state_dict(model.state_dict())  # what transformers' GGUF loader runs: rope_freqs ignored
    ids = ids_for(LENGTHS[-1], LENGTHS[-1])
    run, scaled, plain = ours.forward(ids), attentions(torch, model, ids), attentions(torch, unscaled.eval(), ids)
    gap = max(float(np.abs(a - b).max()) for a, b in zip(scaled, plain, strict=True))
    assert gap > 0.1, gap  # measured 0.99: the scaling is far above the 1e-5 the comparisons hold
    assert max(float(np.abs(a - b).max()) for a, b in zip(run.attentions, plain, strict=True)) > 0.1


def test_llama3_generation_through_the_kv_cache_turns_as_transformers(made, libs):
    """The cache's new rows turn at positions start.. with the file's factors too: greedy ids equal transformers'
    generate and every step's attention row its full forward's, past original_max_position_embeddings (8)."""
    from qkv_cli.pipeline.generate import generate
    from qkv_cli.text.tokens import Tokens

    torch = libs[0]
    path, model = made("llama-llama3")
    prompt, new = ids_for(5, 3), 14
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = None, 0
    with torch.no_grad():
        want = model.generate(torch.tensor([prompt]), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    want = want[0, len(prompt) :].tolist()
    labels = tuple(map(str, prompt))
    tokens = Tokens(strings=labels, labels=labels, offsets=((0, 0),) * len(prompt), ids=tuple(prompt))
    gen = generate(load_model(path), tokens, new)
    assert gen.step_ids.tolist() == want
    ref = attentions(torch, model, prompt + want)
    for t in range(new):
        q = len(prompt) + t - 1  # the query that wrote token len(prompt) + t
        for layer, a in enumerate(ref):
            np.testing.assert_allclose(gen.step_attentions[t, layer, :, : q + 1], a[:, q, : q + 1], atol=1e-5)


def test_the_vocabulary_tokenizes_as_the_models_tokenizer(made):
    from tokenizers import Tokenizer

    from qkv_cli.text.tokens import BPE_PATH

    text = "The cat sat on the mat, because it was warm.<|endoftext|>"
    want = Tokenizer.from_file(str(BPE_PATH)).encode(text).ids
    for case in ("gpt_neox-sequential", "olmo2"):
        assert list(load_model(made(case)[0]).tokenize(text).ids) == want


def test_the_file_holds_the_converters_layout(made, libs):
    """The file really is in llama.cpp's layout: attn_qkv rows [Q | K | V], names blk.N.*, F16 where chosen."""
    from qkv_cli.models.formats.gguf.reader import read_gguf

    path, model = made("gpt_neox-f16")
    g = read_gguf(path)
    qkv = model.state_dict()["gpt_neox.layers.0.attention.query_key_value.weight"].numpy()
    stored = g.tensors["blk.0.attn_qkv.weight"].read()
    np.testing.assert_array_equal(stored[:16], qkv.reshape(2, 3, 16, 32)[:, 0].reshape(32, 32)[:16])  # q of head 0
    assert g.metadata["general.architecture"] == "gptneox" and "gptneox.rope.freq_base" not in g.metadata
    kinds = {name: t.kind for name, t in g.tensors.items()}
    assert kinds["blk.0.attn_qkv.weight"] == kinds["token_embd.weight"] == kinds["output.weight"] == "F16"
    assert kinds["blk.0.attn_qkv.bias"] == kinds["blk.0.attn_norm.weight"] == kinds["output_norm.bias"] == "F32"
    olmo = read_gguf(made("olmo2")[0])
    assert {"blk.0.attn_q_norm.weight", "blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"} <= set(
        olmo.tensors)  # fmt: skip
    assert "blk.0.attn_norm.weight" not in olmo.tensors and "olmo2.attention.layer_norm_rms_epsilon" in olmo.metadata


def test_llama_and_gemma_files_hold_what_llama_cpp_changed(made):
    """attn_q and attn_k rows permuted per head (k with its 2 key/value heads, biases too), Gemma's norms as 1 + w,
    no lm_head in a tied or Gemma 2 file, and no query_pre_attn_scalar anywhere."""
    from qkv_cli.models.formats.gguf.reader import read_gguf

    path, model = made("llama-tied-bias")
    g, w = read_gguf(path), {k: v.numpy() for k, v in model.state_dict().items()}
    q, kb = w["model.layers.0.self_attn.q_proj.weight"], w["model.layers.0.self_attn.k_proj.bias"]
    np.testing.assert_array_equal(g.tensors["blk.0.attn_q.weight"].read(), permute(q, 4))
    np.testing.assert_array_equal(g.tensors["blk.0.attn_k.bias"].read(), permute(kb, 2))
    assert not np.array_equal(permute(q, 4), q) and "output.weight" not in g.tensors
    assert g.metadata["llama.rope.dimension_count"] == 8 and g.metadata["general.architecture"] == "llama"
    assert read_gguf(made("mistral")[0]).metadata["general.architecture"] == "llama"  # MistralForCausalLM: LlamaModel
    path, model = made("gemma2")
    g, norm = read_gguf(path), model.state_dict()["model.layers.1.pre_feedforward_layernorm.weight"].numpy()
    np.testing.assert_array_equal(g.tensors["blk.1.ffn_norm.weight"].read() - np.float32(1), norm)
    assert "output.weight" not in g.tensors and g.metadata["gemma2.attn_logit_softcapping"] == 5.0
    meta = read_gguf(made("gemma3")[0]).metadata
    assert (meta["gemma3.rope.freq_base"], meta["gemma3.rope.freq_base_swa"], meta["gemma3.rope.scaling.type"]) == (
        5000.0, 300.0, "linear")  # fmt: skip
    assert not [key for key in meta | g.metadata if "scalar" in key or "attention.scale" in key]


@pytest.mark.parametrize(
    "arch, layers, d, tau, head_dim, scalar",
    [("gemma2", 46, 4608, 32, 128, 144), ("gemma2", 42, 3584, 16, 256, 256), ("gemma3", 62, 5376, 32, 128, 168),
     ("gemma3", 48, 3840, 16, 256, 256), ("gemma3", 26, 1152, 4, 256, 256)],
    ids=["gemma-2-27b", "gemma-2-9b", "gemma-3-27b", "gemma-3-12b", "gemma-3-1b"],
)  # fmt: skip
def test_gemma_query_scale_is_llama_cpps(arch, layers, d, tau, head_dim, scalar):
    """llama.cpp writes no query_pre_attn_scalar: it scales by 1/sqrt(d // tau) in the 27B models (46 or 62 layers)
    and 1/sqrt(head_dim) in the others (Gemma 3 1B: d // tau = 288, yet 256)."""
    meta = {"general.architecture": arch, f"{arch}.block_count": layers, f"{arch}.embedding_length": d,
            f"{arch}.attention.head_count": tau, f"{arch}.attention.head_count_kv": tau // 2,
            f"{arch}.attention.key_length": head_dim, f"{arch}.context_length": 8192,
            f"{arch}.feed_forward_length": 4 * d, f"{arch}.vocab_size": 256000}  # fmt: skip
    raw = config_dict(meta, {}, "GGUF file 'x.gguf'")
    assert raw.get("query_pre_attn_scalar", head_dim) == scalar
    c = config_from_dict(raw, "x")
    assert c.d_k == head_dim and c.attention.scale == scalar**-0.5


def test_unknown_architecture_lists_the_supported_ones(tmp_path, libs):
    gguf = libs[2]
    w = gguf.GGUFWriter(str(tmp_path / "falcon.gguf"), "falcon")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(QkvError) as exc:
        load_model(tmp_path / "falcon.gguf")
    supported = "supported are llama, mistral, qwen2, qwen3, gemma2, gemma3, gptneox, olmo2"
    assert "GGUF architecture 'falcon' is not supported" in str(exc.value) and supported in str(exc.value)


@pytest.mark.parametrize(
    "meta, message",
    [
        ({"general.architecture": "olmo2", "olmo2.attention.sliding_window": 8}, "sliding-window attention (OLMo 3)"),
        ({"general.architecture": "gptneox", "gptneox.embedding_length": 32, "gptneox.attention.head_count": 2,
          "gptneox.rope.dimension_count": 5}, "gptneox.rope.dimension_count is 5: expected an even number"),
        ({"general.architecture": "gptneox", "gptneox.embedding_length": 32, "gptneox.attention.head_count": 2,
          "gptneox.rope.dimension_count": 18}, "from 2 to the head width 16"),
    ],
    ids=["olmo3 sliding window", "odd rotary dimensions", "rotary dimensions past the head"],
)  # fmt: skip
def test_bad_metadata_is_refused(meta, message):
    with pytest.raises(QkvError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_dict(meta, {}, "GGUF file 'x.gguf'")


@pytest.mark.parametrize(
    "values, message",
    [
        (np.ones(8, np.float32), "'rope_freqs.weight' is F32 [8]: expected F32 or F16 [4], one RoPE frequency"),
        (np.ones((2, 2), np.float32), "'rope_freqs.weight' is F32 [2, 2]: expected F32 or F16 [4]"),
        (np.array([1, 0, 8, 8], np.float32), "'rope_freqs.weight' holds 0.0: every RoPE frequency factor must be"),
        (np.array([1, np.nan, 8, 8], np.float32), "holds nan: every RoPE frequency factor must be finite and positive"),
        (np.array([1, -2, 8, 8], np.float16), "holds -2.0"),
    ],
    ids=["wrong length", "two dimensions", "zero", "nan", "negative f16"],
)  # fmt: skip
def test_bad_rope_freqs_in_a_file_are_one_line(values, message, tmp_path, libs):
    w = libs[2].GGUFWriter(str(tmp_path / "x.gguf"), "llama")
    w.add_block_count(1)
    w.add_context_length(32)
    w.add_embedding_length(32)
    w.add_feed_forward_length(48)
    w.add_head_count(4)  # head_dim 8: 4 rotated pairs
    w.add_tensor("rope_freqs.weight", values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(QkvError) as exc:
        load_model(tmp_path / "x.gguf")
    assert "\n" not in str(exc.value) and message in str(exc.value), str(exc.value)


@pytest.mark.parametrize("used, fragment", [(5, "'num_experts_per_tok' (5) cannot exceed 'num_local_experts' (4)"),
                                            (0, "'num_experts_per_tok' must be at least 1, got 0")])  # fmt: skip
def test_contradictory_expert_counts_in_gguf_metadata_are_one_line_exit_2(used, fragment, made, libs, tmp_path):
    from typer.testing import CliRunner

    from qkv_cli.cli import app

    _, model = made("mixtral")
    bad = copy.deepcopy(model)
    bad.config.num_experts_per_tok = used  # written as mixtral's expert_used_count
    convert(libs[2], bad, tmp_path / "bad.gguf")
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(tmp_path / "bad.gguf")])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output
