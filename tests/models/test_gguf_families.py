"""GGUF files of llama.cpp's `gptneox` and `olmo2` architectures against transformers on the same weights.

transformers' GGUF loader reads neither architecture, so each tiny random model of tests/decoders.py is written to
GGUF here by a small converter that follows llama.cpp's convert_hf_to_gguf.py, not qkv's code: the metadata keys of
GPTNeoXModel.set_gguf_parameters and TextModel.set_gguf_parameters (Olmo2Model adds only keys for sliding windows
and YaRN, which these models lack), the tensor names of gguf-py's own TensorNameMap, GPT-NeoX's fused
query_key_value regrouped from [q_h | k_h | v_h] per head to [Q | K | V] (GPTNeoXModel.modify_tensors; OLMo 2's q and
k are not permuted: only LlamaModel and OlmoModel do that), F32 or the converter's F16 choice (2-D weights F16;
norms, biases and 1-D tensors F32), and the byte-level vocabulary of _set_vocab_gpt2. qkv loads the file; every
layer's attention must equal transformers' eager attention within 1e-5 in float32 (1e-10 in float64), and the final
hidden state and the logits must agree too.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from decoders import attentions, build, float64_everywhere, float64_twin
from helpers import reference_import

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.models.gguf_map import config_dict

pytestmark = pytest.mark.reference
LENGTHS = (1, 7, 19)
SKIPPED = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")  # ModelBase.prepare_tensors
# case -> (tests/decoders.py case, F16 weights, write rope.freq_base); GPTNeoXModel writes no rope.freq_base, which
# llama.cpp then reads as 10000: the case with rotary_emb_base 200 adds the key (llama.cpp reads it for every
# architecture), the sequential one (base 10000) is the converter's output exactly
CASES = {
    "gpt_neox": ("gpt_neox", False, True),
    "gpt_neox-sequential": ("gpt_neox-sequential", False, False),
    "olmo2": ("olmo2", False, False),
    "gpt_neox-f16": ("gpt_neox-sequential", True, False),
    "olmo2-f16": ("olmo2", True, False),
}


@pytest.fixture(scope="module")
def libs():
    torch = reference_import("torch")
    return torch, reference_import("transformers"), reference_import("gguf")


@pytest.fixture(scope="module")
def made(libs, tmp_path_factory):
    """case -> (GGUF path, the transformers model whose weights are the file's: F16 ones rounded), built once."""
    torch, transformers, gguf = libs
    models, out = {}, {}

    def get(case):
        if case not in out:
            name, f16, freq_base = CASES[case]
            if name not in models:
                models[name] = build(transformers, torch, name, tmp_path_factory.mktemp(name))
            path = tmp_path_factory.mktemp("gguf") / f"{case}.gguf"
            halves = convert(gguf, models[name], path, f16, freq_base)
            out[case] = (path, rounded(torch, models[name], halves))
        return out[case]

    return get


def write_vocab(w) -> None:
    """TextModel._set_vocab_gpt2 with qkv's small byte-level BPE (the tiny models' tokenizer): tokens by id, added
    special ones as CONTROL (3), merges as "a b"; its pre-tokenizer is GPT-2's."""
    from qkv_cli.text.tokens import BPE_PATH

    doc = json.loads(BPE_PATH.read_text(encoding="utf-8"))
    by_id = {i: t for t, i in doc["model"]["vocab"].items()} | {a["id"]: a["content"] for a in doc["added_tokens"]}
    special = {a["id"] for a in doc["added_tokens"] if a["special"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([by_id[i] for i in range(len(by_id))])
    w.add_token_types([3 if i in special else 1 for i in range(len(by_id))])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]])
    w.add_eos_token_id(min(special))


def convert(gguf, model, path, f16: bool, freq_base: bool) -> set[str]:
    """Write `model` to `path` as convert_hf_to_gguf.py does; returns the Hugging Face names stored as F16."""
    h = model.config.to_dict()  # ModelBase.load_hparams: AutoConfig.from_pretrained(folder).to_dict()
    neox = h["model_type"] == "gpt_neox"
    arch = gguf.MODEL_ARCH.GPTNEOX if neox else gguf.MODEL_ARCH.OLMO2
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(f"tiny {h['model_type']}")
    n_head, d, n_layers = h["num_attention_heads"], h["hidden_size"], h["num_hidden_layers"]
    rope = h.get("rope_parameters") or {}  # TextModel.__init__ mirrors rope_theta / rotary_emb_base into it
    if neox:  # GPTNeoXModel.set_gguf_parameters (no call to TextModel's)
        w.add_context_length(h["max_position_embeddings"])
        w.add_embedding_length(d)
        w.add_block_count(n_layers)
        w.add_feed_forward_length(h["intermediate_size"])
        pct = h.get("rotary_pct", rope.get("partial_rotary_factor"))  # transformers v5 keeps it in rope_parameters
        w.add_rope_dimension_count(int(pct * (d // n_head)))
        w.add_head_count(n_head)
        w.add_parallel_residual(h.get("use_parallel_residual", True))
        w.add_layer_norm_eps(h["layer_norm_eps"])
        if freq_base:
            w.add_rope_freq_base(rope["rope_theta"])
    else:  # TextModel.set_gguf_parameters
        w.add_block_count(n_layers)
        w.add_context_length(h["max_position_embeddings"])
        w.add_embedding_length(d)
        w.add_feed_forward_length(h["intermediate_size"])
        w.add_head_count(n_head)
        w.add_head_count_kv(h["num_key_value_heads"])
        w.add_rope_freq_base(rope["rope_theta"])
        w.add_layer_norm_rms_eps(h["rms_norm_eps"])
        if h.get("head_dim") is not None:
            w.add_key_length(h["head_dim"])
            w.add_value_length(h["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    write_vocab(w)
    names, halves = gguf.get_tensor_name_map(arch, n_layers), set()
    for name, t in model.state_dict().items():
        if name.endswith(SKIPPED):
            continue
        x = t.detach().numpy()
        if neox and name.endswith(("attention.query_key_value.weight", "attention.query_key_value.bias")):
            parts = x.reshape(n_head, 3, d // n_head, *x.shape[1:])  # per head [q_h | k_h | v_h]
            x = np.concatenate([parts[:, i].reshape(-1, *x.shape[1:]) for i in range(3)])  # -> [Q | K | V]
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))  # ModelBase.map_tensor_name
        assert new is not None, f"llama.cpp has no name for {name}"
        half = f16 and x.ndim > 1 and new.endswith(".weight") and not new.endswith("_norm.weight")
        if half:
            halves.add(name)
        w.add_tensor(new, x.astype(np.float16 if half else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return halves


def rounded(torch, model, halves: set[str]):
    """The model with the weights stored as F16 rounded to float16, as the file holds them."""
    if not halves:
        return model
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in twin.named_parameters():
            if name in halves:
                p.copy_(p.half().float())
    return twin


def ids_for(m: int, seed: int) -> list[int]:
    return [int(i) for i in np.random.default_rng(seed).integers(3, 1400, m)]


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
        assert run.attentions.dtype == np.float32 and len(ref) == len(run.attentions) == 3
        for layer, want in enumerate(ref):
            np.testing.assert_allclose(run.attentions[layer], want, atol=1e-5, rtol=0, err_msg=f"{case} layer {layer}")
        with torch.no_grad():
            hidden = model.base_model(torch.tensor([ids])).last_hidden_state[0].numpy()
            logits = model(torch.tensor([ids])).logits[0].numpy()
        np.testing.assert_allclose(run.last_hidden_state, hidden, atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(logits_of(ours, run), logits, atol=5e-4, rtol=1e-4)


@pytest.mark.parametrize("case", ["gpt_neox", "gpt_neox-sequential", "olmo2"])
def test_float64_attention_matches_a_float64_transformers(case, made, libs):
    torch, transformers, _ = libs
    path, model = made(case)
    ours = load_model(path, dtype="float64")
    ids = ids_for(LENGTHS[-1], 1)
    with float64_everywhere(torch):
        twin = float64_twin(transformers, torch, model)
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
    assert (c.family, c.n_layers, c.n_heads, c.d, c.d_ff, c.vocab_size) == (
        h.model_type, 3, h.num_attention_heads, 32, 48, h.vocab_size)  # fmt: skip
    rope = c.opt("ropes")[""]
    assert not c.opt("tie_embeddings") and c.max_positions == h.max_position_embeddings
    if h.model_type == "gpt_neox":
        assert rope.rot == model.gpt_neox.layers[0].attention.rotary_ndims == 4  # rope.dimension_count, exactly
        assert rope.theta == h.rope_parameters["rope_theta"]  # 200 from rope.freq_base, or llama.cpp's 10000
        assert c.opt("parallel_residual") is h.use_parallel_residual and c.opt("qkv_bias") and c.n_kv_heads == 2
        assert c.norm_eps == float(np.float32(h.layer_norm_eps))  # GGUF stores it as float32
        assert c.opt("norm") == "layer" and c.activation == h.hidden_act
    else:
        assert (rope.rot, rope.theta, c.n_kv_heads) == (c.d_k, 10000.0, h.num_key_value_heads) == (8, 10000.0, 2)
        assert c.norm_eps == float(np.float32(h.rms_norm_eps))
        assert not c.opt("qkv_bias") and c.opt("qk_norm") == "flat"


def test_without_rope_freq_base_gpt_neox_turns_at_llama_cpps_10000(made, tmp_path, libs):
    """GPTNeoXModel leaves rotary_emb_base out: llama.cpp then turns at 10000, and so does qkv (not transformers)."""
    _, model = made("gpt_neox")
    convert(libs[2], model, tmp_path / "no-base.gguf", False, False)
    ours = load_model(tmp_path / "no-base.gguf")
    assert ours.config.opt("ropes")[""].theta == 10000.0 != model.config.rope_parameters["rope_theta"]


def test_the_vocabulary_tokenizes_as_the_models_tokenizer(made):
    from tokenizers import Tokenizer

    from qkv_cli.text.tokens import BPE_PATH

    text = "The cat sat on the mat, because it was warm.<|endoftext|>"
    want = Tokenizer.from_file(str(BPE_PATH)).encode(text).ids
    for case in ("gpt_neox-sequential", "olmo2"):
        assert list(load_model(made(case)[0]).tokenize(text).ids) == want


def test_the_file_holds_the_converters_layout(made, libs):
    """The file really is in llama.cpp's layout: attn_qkv rows [Q | K | V], names blk.N.*, F16 where chosen."""
    from qkv_cli.models.gguf import read_gguf

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
