"""A small converter of tiny transformers models to GGUF that follows llama.cpp's convert_hf_to_gguf.py (the
conversion/ package of ggml-org/llama.cpp), not qkv's code: the tests load its files with qkv and compare with
transformers on the same weights.

What each architecture's model class writes:
- metadata: TextModel.set_gguf_parameters (block, context, embedding, feed-forward lengths, head counts, the RoPE
  scaling type and factor of the full-attention layers, rope.freq_base, rope.freq_base_swa from the sliding layers'
  rope_theta, the norm epsilons, key/value lengths from head_dim); LlamaModel adds vocab_size and
  rope.dimension_count; Qwen2Model and Qwen3Model add nothing used here; GPTNeoXModel and Gemma2Model write their
  own lists (no rope.freq_base: llama.cpp then turns at 10000), Gemma 2 its soft-caps and sliding window;
  Gemma3Model calls TextModel's and adds the final soft-cap (when set) and the sliding window. No class writes
  query_pre_attn_scalar, a Qwen or Mistral sliding window, or which layers slide.
- tensors (modify_tensors): LlamaModel (llama, and Mistral, which it registers) permutes the rows of q_proj and
  k_proj (weights and biases) per head from halves to pairs, k with the key/value head count; Gemma 2 and 3 store
  every "*norm.weight" as 1 + w; Gemma2Model skips lm_head; Gemma3Model cuts token_embd to the tokenizer's size;
  GPTNeoXModel regroups query_key_value from [q_h | k_h | v_h] per head to [Q | K | V]; a tied model's safetensors
  hold no lm_head. Names come from gguf-py's TensorNameMap; F16 files store 2-D weights as F16 and norms, biases
  and 1-D tensors as F32 (ModelBase.prepare_tensors).
- mixtures of experts: LlamaModel (Mixtral) stacks each layer's block_sparse_moe.experts.e.w1 / w2 / w3 into
  feed_forward.experts.w1 / w2 / w3 [E, rows, columns], Qwen2MoeModel (Qwen3MoeModel) and OlmoeModel their
  mlp.experts.e.gate_proj / up_proj / down_proj into mlp.experts.<name>, from the checkpoint's files (as
  save_pretrained writes them: one tensor per expert); TextModel writes expert_count (num_local_experts or
  num_experts) and expert_used_count, Qwen2MoeModel expert_feed_forward_length, OlmoeModel layer_norm_rms_eps 1e-5.
- a `llama3` rope scaling (Llama 3.1) is no metadata key but the F32 tensor rope_freqs.weight, one factor per
  rotated pair (LlamaModel.generate_extra_tensors, written before the model's tensors).
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np

SKIPPED = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")  # ModelBase.prepare_tensors
ARCHES = {"llama": "LLAMA", "mistral": "LLAMA", "qwen2": "QWEN2", "qwen3": "QWEN3", "gemma2": "GEMMA2",
          "gemma3_text": "GEMMA3", "gpt_neox": "GPTNEOX", "olmo2": "OLMO2", "mixtral": "LLAMA",
          "qwen3_moe": "QWEN3MOE", "olmoe": "OLMOE", "smollm3": "SMOLLM3"}  # fmt: skip
LLAMAS = ("llama", "mistral", "mixtral", "smollm3")  # LlamaModel and its subclasses (SmolLM3Model): q, k permuted
MOE = ("mixtral", "qwen3_moe", "olmoe")
GEMMAS = ("gemma2", "gemma3_text")


def expressible(transformers, torch, model):
    """`model` as a GGUF file can hold it: the config keys llama.cpp never writes set to what llama.cpp assumes
    (no Mistral or Qwen window; query_pre_attn_scalar = head_dim below 27B; Gemma 3's sliding layers by its fixed
    pattern of 6, so 6 layers, the last one global), the same weights (new layers random), Gemma 2's lm_head = E;
    a llama3 RoPE's original_max_position_embeddings also at the config's top level, the only place LlamaModel reads
    it (else 8192, Llama 3's value; transformers reads either, the top level first)."""
    kind = model.config.model_type
    rope = model.config.rope_parameters or {}
    if kind == "llama" and rope.get("rope_type") == "llama3":
        out = copy.deepcopy(model)
        out.config.original_max_position_embeddings = rope["original_max_position_embeddings"]
        return out
    if kind not in ("mistral", "qwen2", "qwen3", "smollm3", *GEMMAS, *MOE):
        return model
    c = copy.deepcopy(model.config)
    if kind in ("mistral", "mixtral"):
        c.sliding_window = None
    if kind == "qwen3_moe":  # llama.cpp: every layer has experts, renormalised (build_moe_ffn's norm_w)
        c.mlp_only_layers, c.decoder_sparse_step, c.norm_topk_prob = [], 1, True
    if kind == "olmoe":  # never renormalised
        c.norm_topk_prob = False
    if kind == "smollm3":  # llama.cpp: no key for NoPE, layer il without RoPE iff (il + 1) % 4 == 0; no window
        c.no_rope_layer_interval = 4
        c.no_rope_layers = [int((i + 1) % 4 != 0) for i in range(c.num_hidden_layers)]
    if kind in ("qwen2", "qwen3", "qwen3_moe", "smollm3"):
        c.use_sliding_window, c.layer_types = False, ["full_attention"] * c.num_hidden_layers
    if kind in GEMMAS:
        c.query_pre_attn_scalar = c.head_dim
    if kind == "gemma3_text":  # llama.cpp: layer il slides iff il % 6 < 5
        c.num_hidden_layers = 6
        c.layer_types = ["sliding_attention" if i % 6 < 5 else "full_attention" for i in range(6)]
    from decoders import eager

    out = transformers.AutoModelForCausalLM.from_config(c, **eager(kind))
    missing = set(out.load_state_dict(model.state_dict(), strict=False).missing_keys)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name in missing:  # as tests/support/decoders.py draws them (Gemma's norms stored as w - 1)
                p.copy_(torch.randn_like(p) * 0.3)
        if kind == "gemma2":
            out.lm_head.weight.copy_(out.model.embed_tokens.weight)
    return out.eval()


def as_stored(torch, model, halves: set[str]):
    """The model with the weights the file holds: F16 ones rounded to float16, Gemma's norms as (1 + w) - 1 in
    float32 (what qkv and transformers' GGUF loader read back), Gemma 2's output head E as stored."""
    gemma = model.config.model_type in GEMMAS
    if not halves and not gemma:
        return model
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in twin.named_parameters():
            if name in halves:
                p.copy_(p.half().float())
            if gemma and name.endswith("norm.weight"):
                p.copy_((p + 1) - 1)
        if model.config.model_type == "gemma2":  # its output head is the stored E
            twin.lm_head.weight.copy_(twin.model.embed_tokens.weight)
    return twin


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


def text_parameters(gguf, w, h: dict) -> None:
    """TextModel.set_gguf_parameters (rope_parameters holds rope_theta: TextModel.__init__ mirrors it there)."""
    w.add_block_count(h["num_hidden_layers"])
    w.add_context_length(h["max_position_embeddings"])
    w.add_embedding_length(h["hidden_size"])
    w.add_feed_forward_length(h["intermediate_size"])
    w.add_head_count(h["num_attention_heads"])
    w.add_head_count_kv(h["num_key_value_heads"])
    rope = h.get("rope_parameters") or {}
    full = rope.get("full_attention", rope)
    if full.get("rope_type") in ("linear", "yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType(full["rope_type"]))
        w.add_rope_scaling_factor(full["factor"])
    if full.get("rope_type") == "yarn":
        w.add_rope_scaling_orig_ctx_len(full["original_max_position_embeddings"])
        for key, add in (("extrapolation_factor", w.add_rope_scaling_yarn_ext_factor),
                         ("attention_factor", w.add_rope_scaling_yarn_attn_factor),
                         ("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):  # fmt: skip
            if full.get(key) is not None:
                add(full[key])
    w.add_rope_freq_base(full["rope_theta"])
    if "rope_theta" in rope.get("sliding_attention", {}):
        w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(h["rms_norm_eps"])
    if h.get("head_dim") is not None:
        w.add_key_length(h["head_dim"])
        w.add_value_length(h["head_dim"])


def neox_parameters(w, h: dict, freq_base: bool) -> None:
    """GPTNeoXModel.set_gguf_parameters (no call to TextModel's); `freq_base` adds the rope.freq_base it omits."""
    d, n_head = h["hidden_size"], h["num_attention_heads"]
    rope = h.get("rope_parameters") or {}
    w.add_context_length(h["max_position_embeddings"])
    w.add_embedding_length(d)
    w.add_block_count(h["num_hidden_layers"])
    w.add_feed_forward_length(h["intermediate_size"])
    pct = h.get("rotary_pct", rope.get("partial_rotary_factor"))  # transformers v5 keeps it in rope_parameters
    w.add_rope_dimension_count(int(pct * (d // n_head)))
    w.add_head_count(n_head)
    w.add_parallel_residual(h.get("use_parallel_residual", True))
    w.add_layer_norm_eps(h["layer_norm_eps"])
    if freq_base:
        w.add_rope_freq_base(rope["rope_theta"])


def gemma2_parameters(w, h: dict) -> None:
    """Gemma2Model.set_gguf_parameters (no call to TextModel's: no rope.freq_base)."""
    w.add_context_length(h["max_position_embeddings"])
    w.add_embedding_length(h["hidden_size"])
    w.add_block_count(h["num_hidden_layers"])
    w.add_feed_forward_length(h["intermediate_size"])
    w.add_head_count(h["num_attention_heads"])
    w.add_head_count_kv(h["num_key_value_heads"])
    w.add_layer_norm_rms_eps(h["rms_norm_eps"])
    w.add_key_length(h["head_dim"])
    w.add_value_length(h["head_dim"])
    w.add_attn_logit_softcapping(h["attn_logit_softcapping"])
    w.add_final_logit_softcapping(h["final_logit_softcapping"])
    w.add_sliding_window(h["sliding_window"])


def write_parameters(gguf, w, h: dict, freq_base: bool) -> None:
    kind = h["model_type"]
    if kind == "gpt_neox":
        return neox_parameters(w, h, freq_base)
    if kind == "gemma2":
        return gemma2_parameters(w, h)
    text_parameters(gguf, w, h)
    if kind in MOE:  # TextModel (find_hparam: num_local_experts, then num_experts), then the model class's own
        w.add_expert_count(h.get("num_local_experts") or h["num_experts"])
        w.add_expert_used_count(h["num_experts_per_tok"])
    if kind == "qwen3_moe":  # Qwen2MoeModel (its expert_count again: the same value)
        w.add_expert_feed_forward_length(h["moe_intermediate_size"])
    if kind == "olmoe":
        w.add_layer_norm_rms_eps(1e-5)
    if kind in LLAMAS:  # LlamaModel
        w.add_vocab_size(h["vocab_size"])
        w.add_rope_dimension_count(h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"])
    if kind == "gemma3_text":  # Gemma3Model: TextModel's keys again (same values), then these
        if h.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(h["final_logit_softcapping"])
        if h.get("sliding_window_pattern") != 1:
            w.add_sliding_window(h["sliding_window"])


def llama3_rope_freqs(h: dict):
    """LlamaModel.generate_extra_tensors: a llama3 RoPE as one factor per rotated pair, theta_k divided by it gives
    Llama 3.1's scaled theta_k; computed as the converter does, with torch in float32 (None for other RoPE types)."""
    import torch

    rope_parameters = h.get("rope_parameters", h.get("rope_scaling")) or {}  # TextModel.__init__
    rope_params = rope_parameters.get("full_attention", rope_parameters)
    if h["model_type"] not in ("llama", "mistral") or rope_params.get("rope_type", "").lower() != "llama3":
        return None
    base = rope_params.get("rope_theta", 10000.0)
    if (dim := h.get("head_dim")) is None:
        dim = h["hidden_size"] // h["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope_params.get("factor", 8.0)
    low_freq_factor = rope_params.get("low_freq_factor", 1.0)
    high_freq_factor = rope_params.get("high_freq_factor", 4.0)
    old_context_len = h.get("original_max_position_embeddings", 8192)  # the top level only: see expressible
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(rope_factors, dtype=torch.float32).numpy()


def permute(x, n_head: int):  # LlamaModel.permute: per head, rows [first half | second half] -> pairs
    return x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def modified(h: dict, name: str, x, n_vocab: int):
    """The tensor `name` as modify_tensors leaves it, or None for one the converter skips."""
    kind, n_head = h["model_type"], h["num_attention_heads"]
    if name.endswith(SKIPPED) or (name == "lm_head.weight" and (h["tie_word_embeddings"] or kind == "gemma2")):
        return None
    if kind in LLAMAS and name.endswith(("q_proj.weight", "q_proj.bias")):
        return permute(x, n_head)
    if kind in LLAMAS and name.endswith(("k_proj.weight", "k_proj.bias")):
        return permute(x, h["num_key_value_heads"])
    if kind in GEMMAS and name.endswith("norm.weight"):
        return x + np.float32(1)
    if kind == "gemma3_text" and "embed_tokens.weight" in name:
        return x[:n_vocab]
    if kind == "gpt_neox" and name.endswith(("attention.query_key_value.weight", "attention.query_key_value.bias")):
        parts = x.reshape(n_head, 3, h["hidden_size"] // n_head, *x.shape[1:])  # per head [q_h | k_h | v_h]
        return np.concatenate([parts[:, i].reshape(-1, *x.shape[1:]) for i in range(3)])  # -> [Q | K | V]
    return x


def checkpoint_tensors(model, h: dict):
    """(name, array) as the converter reads the checkpoint: the model's state dict, or for a mixture of experts the
    files save_pretrained writes (one tensor per expert), each layer's experts then stacked as the model class
    does: [E, rows, columns] under the merged name its tensor map knows."""
    if h["model_type"] not in MOE:
        yield from ((name, t.detach().numpy()) for name, t in model.state_dict().items())
        return
    import tempfile
    from pathlib import Path

    from safetensors.numpy import load_file

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        stored = {}
        for part in sorted(Path(folder).glob("*.safetensors")):
            stored |= load_file(str(part))
    E = h.get("num_local_experts") or h["num_experts"]
    mixtral = h["model_type"] == "mixtral"
    module, names = (
        ("block_sparse_moe", ("w1", "w2", "w3")) if mixtral else ("mlp", ("down_proj", "gate_proj", "up_proj"))
    )
    for name, x in stored.items():
        if ".experts." not in name:
            yield name, x
        elif name.endswith(f".experts.{E - 1}.{names[-1]}.weight"):  # the layer's last: all of its experts are in
            bid = int(name.split(".")[2])
            for wid in names:
                data = np.stack([stored[f"model.layers.{bid}.{module}.experts.{e}.{wid}.weight"] for e in range(E)])
                merged = (
                    f"layers.{bid}.feed_forward.experts.{wid}" if mixtral else f"model.layers.{bid}.mlp.experts.{wid}"
                )
                yield merged + ".weight", data


def parameter(name: str) -> str:
    """The model's own parameter behind a checkpoint (or merged) tensor name of a mixture of experts: transformers
    holds a layer's experts as experts.gate_up_proj [E, 2 d_e, d] and experts.down_proj, its router as mlp.gate."""
    name = name.replace("block_sparse_moe.", "mlp.").replace("layers.", "model.layers.", not name.startswith("model."))
    for stacked, fused in ((".feed_forward.experts.w1.", ".mlp.experts.gate_up_proj"),
                           (".feed_forward.experts.w3.", ".mlp.experts.gate_up_proj"),
                           (".feed_forward.experts.w2.", ".mlp.experts.down_proj"),
                           (".mlp.experts.gate_proj.", ".mlp.experts.gate_up_proj"),
                           (".mlp.experts.up_proj.", ".mlp.experts.gate_up_proj"),
                           (".mlp.experts.down_proj.", ".mlp.experts.down_proj")):  # fmt: skip
        if stacked in name:
            return name.split(stacked)[0] + fused
    return name


def add_named(w, names, hf: str, x) -> None:
    """Store x (as float32) under llama.cpp's name for the Hugging Face tensor hf (ModelBase.map_tensor_name)."""
    new = names.get_name(hf, try_suffixes=(".weight", ".bias"))
    assert new is not None, f"llama.cpp has no name for {hf}"
    w.add_tensor(new, np.ascontiguousarray(x, dtype=np.float32))


def finish(w) -> None:
    """Write the header, the metadata and the tensors, and close the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert(gguf, model, path, f16: bool = False, freq_base: bool = False) -> set[str]:
    """Write `model` to `path` as convert_hf_to_gguf.py does; returns the Hugging Face names stored as F16."""
    from qkv_cli.text.tokens import BPE_PATH

    h = model.config.to_dict()  # ModelBase.load_hparams: AutoConfig.from_pretrained(folder).to_dict()
    arch = getattr(gguf.MODEL_ARCH, ARCHES[h["model_type"]])
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(f"tiny {h['model_type']}")  # general.name: "tiny mistral" says Mistral in a llama file
    write_parameters(gguf, w, h, freq_base)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    write_vocab(w)
    doc = json.loads(BPE_PATH.read_text(encoding="utf-8"))
    n_vocab = len(doc["model"]["vocab"]) + len(doc["added_tokens"])  # Gemma3Model's "real" vocabulary size
    names, halves = gguf.get_tensor_name_map(arch, h["num_hidden_layers"]), set()
    if (factors := llama3_rope_freqs(h)) is not None:  # ModelBase.prepare_tensors: extra tensors first, 1-D as F32
        w.add_tensor(f"{gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS]}.weight", factors)
    for name, x in checkpoint_tensors(model, h):
        x = modified(h, name, x, n_vocab)
        if x is None:
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))  # ModelBase.map_tensor_name
        assert new is not None, f"llama.cpp has no name for {name}"
        half = f16 and x.ndim > 1 and new.endswith(".weight") and not new.endswith("_norm.weight")
        if half:
            halves.add(parameter(name) if h["model_type"] in MOE else name)
        w.add_tensor(new, x.astype(np.float16 if half else np.float32))
    finish(w)
    return halves
