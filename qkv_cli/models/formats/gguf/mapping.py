"""A GGUF file (llama.cpp) as a Hugging Face checkpoint: its metadata as config.json keys, its tensors under
Hugging Face names, as transformers' own GGUF loader maps them.

Three things llama.cpp's converter changed are undone here: the rows of attn_q and attn_k of `llama` files were
permuted for ggml's rotary layout (pairs instead of halves), Gemma's norm weights were stored as 1 + w, and
GPT-NeoX's fused attn_qkv was regrouped from [q_h | k_h | v_h] per head to [Q | K | V] (GPTNeoXModel.modify_tensors).
What it never writes is read as llama.cpp reads it: biases by their presence, Gemma's query scale by model size,
Llama 3.1's RoPE scaling from the per-pair factors of rope_freqs. A mixture of experts (Mixtral: a `llama` file with
ffn_gate_inp; qwen3moe; olmoe) stacks each layer's experts in one tensor [E, rows, columns] (ffn_gate_exps,
ffn_up_exps, ffn_down_exps): each expert is read back alone, as its own rows of the stack (models.formats.gguf.experts).
gpt-oss, deepseek2 and phi3 files have their own modules (models.formats.gguf.gpt_oss, gguf_deepseek, gguf_phi3).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.config import GGUF_ONLY, MAX_WIDTH
from qkv_cli.models.formats.gguf import experts as gguf_experts
from qkv_cli.models.formats.gguf.header import shown
from qkv_cli.models.formats.safetensors import Tensor

ARCHITECTURES = {  # GGUF general.architecture -> model_type
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
    "gemma3": "gemma3_text", "gptneox": "gpt_neox", "olmo2": "olmo2", "qwen3moe": "qwen3_moe", "olmoe": "olmoe",
    "gpt-oss": "gpt_oss", "deepseek2": "deepseek_v3", "smollm3": "smollm3", "phi3": "phi3",
    "llama4": "llama4_text",
}  # fmt: skip
# architectures with their own module (formats.gguf.<name>): config(raw, meta, tensors, where) fills the config.json
# keys llama.cpp reads or fixes for it, tensors(out, gguf, raw) renames and joins its tensors, LAYER_NAMES (where
# the module has them) adds its blk.N.<name> entries
OWN_MODULES = {"deepseek2": "deepseek2", "phi3": "phi3", "llama4": "llama4"}
CONFIG_KEYS = {  # {arch}.<key> -> config.json key
    "block_count": "num_hidden_layers", "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size", "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
    "rope.freq_base": "rope_theta", "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.key_length": "head_dim", "attention.sliding_window": "sliding_window", "vocab_size": "vocab_size",
    "attn_logit_softcapping": "attn_logit_softcapping", "final_logit_softcapping": "final_logit_softcapping",
    "attention.layer_norm_epsilon": "layer_norm_eps", "use_parallel_residual": "use_parallel_residual",
    "rope.freq_base_swa": "rope_local_base_freq", "expert_count": "num_local_experts",
    "expert_used_count": "num_experts_per_tok", "expert_feed_forward_length": "moe_intermediate_size",
}  # fmt: skip
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3_text": 62}  # llama.cpp's LLM_TYPE_27B of each: scale 1/sqrt(d / tau)
LAYER_NAMES = {  # blk.N.<name> -> model.layers.N.<name> (Gemma's ffn_norm is its pre_feedforward_layernorm)
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}  # fmt: skip
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
NEOX_LAYER_NAMES = {  # blk.N.<name> -> gpt_neox.layers.N.<name>
    "attn_norm": "input_layernorm", "attn_qkv": "attention.query_key_value", "attn_output": "attention.dense",
    "ffn_norm": "post_attention_layernorm", "ffn_up": "mlp.dense_h_to_4h", "ffn_down": "mlp.dense_4h_to_h",
}  # fmt: skip
MOE_NORMALISED = {"qwen3_moe": True, "olmoe": False}  # Mixtral always renormalises (its family's rule)
NEOX_GLOBAL_NAMES = {"token_embd": "gpt_neox.embed_in", "output_norm": "gpt_neox.final_layer_norm",
                     "output": "embed_out"}  # fmt: skip


def model_type(meta: dict, where: str) -> str:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise QkvError(
            f"{where}: GGUF architecture {shown(arch)} is not supported: supported are {', '.join(ARCHITECTURES)}"
        )
    name = meta.get("general.name", "")
    if arch == "llama" and isinstance(name, str) and "mistral" in name.lower():
        return "mistral"  # llama.cpp writes Mistral models as llama (transformers does the same)
    return ARCHITECTURES[arch]


def config_dict(meta: dict, tensors: dict, where: str) -> dict:
    """config.json keys from the GGUF metadata (and whether the output head is tied: no output.weight)."""
    kind = model_type(meta, where)
    if kind in ("llama", "mistral") and "blk.0.ffn_gate_inp.weight" in tensors:
        kind = "mixtral"  # llama.cpp writes Mixtral as llama with a router and stacked experts
    arch = meta["general.architecture"]
    raw = {"model_type": kind, "tie_word_embeddings": "output.weight" not in tensors}
    for key, hf in CONFIG_KEYS.items():
        if f"{arch}.{key}" in meta:
            raw[hf] = meta[f"{arch}.{key}"]
    if kind == "smollm3":  # llama.cpp writes no key for NoPE: layer il has no RoPE iff (il + 1) % 4 == 0, always
        raw["no_rope_layer_interval"] = 4
    if kind in ("llama", "smollm3") and f"{arch}.rope.dimension_count" in meta:
        raw["head_dim"] = meta[f"{arch}.rope.dimension_count"]
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raw["rope_scaling"] = {"rope_type": scaling, "factor": meta.get(f"{arch}.rope.scaling.factor", 1.0)}
        if f"{arch}.rope.scaling.original_context_length" in meta:
            raw["rope_scaling"]["original_max_position_embeddings"] = meta[
                f"{arch}.rope.scaling.original_context_length"
            ]
    only = raw[GGUF_ONLY] = {}  # what config.json has no key for
    if "rope_freqs.weight" in tensors:  # Llama 3.1's scaling, as llama.cpp writes it
        only["freq_factors"] = rope_factors(raw, tensors, arch, where)
    if "tokenizer.ggml.eos_token_id" in meta:
        raw["eos_token_id"] = meta["tokenizer.ggml.eos_token_id"]
    tokens = meta.get("tokenizer.ggml.tokens")
    if "vocab_size" not in raw and isinstance(tokens, list):
        raw["vocab_size"] = len(tokens)
    if isinstance(tokens, list) and isinstance(raw.get("vocab_size"), int) and len(tokens) > raw["vocab_size"]:
        raise QkvError(f"{where}: its vocabulary has {len(tokens):,} tokens but the model embeds only "
                       f"{raw['vocab_size']:,} (vocab_size): ids past that would have no embedding")  # fmt: skip
    if kind in ("qwen2", "qwen3") and "sliding_window" in raw:
        raw["use_sliding_window"] = False  # llama.cpp keeps Qwen's window off, as transformers' default does
    if kind == "gpt_neox":
        _neox_config(raw, meta, tensors, where)
    else:  # llama.cpp reads each bias if the file has it (W^o's apart: a Qwen written as llama has q, k, v only)
        raw["attention_bias"] = "blk.0.attn_q.bias" in tensors
        raw["mlp_bias"] = "blk.0.ffn_up.bias" in tensors
        only["o_bias"] = "blk.0.attn_output.bias" in tensors
    if kind == "olmo2" and "sliding_window" in raw:  # OLMo 3 is written as olmo2 too, its sliding layers run full
        raise QkvError(f"{where}: sliding-window attention (OLMo 3) is not supported yet")
    if kind in GEMMA_27B_LAYERS:
        _gemma_scalar(raw)
    if kind in MOE_NORMALISED:  # llama.cpp's build_moe_ffn: renormalised or not by architecture, never by a key
        raw["norm_topk_prob"] = MOE_NORMALISED[kind]
    if arch in OWN_MODULES:  # DeepSeek's latent attention, Phi-3's LongRoPE, Llama 4's chunks and NoPE layers ...
        own_module(arch).config(raw, meta, tensors, where)
    return raw


def own_module(arch: str):
    """The module of an architecture in OWN_MODULES (imported on first use)."""
    import importlib

    return importlib.import_module(f"qkv_cli.models.formats.gguf.{OWN_MODULES[arch]}")


def rope_factors(raw: dict, tensors: dict, arch: str, where: str) -> list[float]:
    """The values of rope_freqs.weight, checked before they are read (rot/2 numbers). llama.cpp's converter writes
    a `llama3` rope_scaling as this F32 tensor, one factor per rotated pair and no scaling key (LlamaModel.
    generate_extra_tensors); llama.cpp turns pair k by p * theta_k / factor_k (ggml_rope_ext's freq_factors), which
    is Llama 3.1's scaled theta_k again. transformers' GGUF loader ignores the tensor (and so runs such a file
    unscaled); qkv does as llama.cpp does."""
    t = tensors["rope_freqs.weight"]
    if arch not in ("llama", "llama4"):  # of qkv's architectures, llama.cpp reads the tensor in these only
        raise QkvError(f"{where}: per-frequency RoPE factors (rope_freqs) in a {arch} file are not supported: "
                       "llama.cpp reads them in llama and llama4 files")  # fmt: skip
    d, tau = raw.get("hidden_size"), raw.get("num_attention_heads")
    rot = raw.get("head_dim") or (d // tau if type(d) is int and type(tau) is int and tau > 0 else None)
    half = rot // 2 if type(rot) is int and 2 <= rot <= MAX_WIDTH else None
    return factor_values(t, "rope_freqs.weight", half, "RoPE frequency factor", where, unknown="head_dim / 2")


def factor_values(t: Tensor, name: str, half: int | None, what: str, where: str, unknown: str = "",
                  note: str = "") -> list[float]:  # fmt: skip
    """A tensor of one factor per rotated pair (rope_freqs, LongRoPE's), checked before it is read: F32 or F16
    [half] (None: no valid width, said as `unknown`; note: how half is counted), finite and positive."""
    if half is None or t.kind not in ("F32", "F16") or tuple(t.shape) != (half,):
        raise QkvError(f"{where}: tensor {name!r} is {t.kind} {list(t.shape)}: expected F32 or F16 "
                       f"[{half or unknown}], one {what} per rotated pair{note}")  # fmt: skip
    values = np.asarray(t.read(), dtype=np.float64)
    bad = values[~(np.isfinite(values) & (values > 0))]
    if bad.size:
        raise QkvError(f"{where}: tensor {name!r} holds {bad[0]}: every {what} must be finite and positive")
    return values.tolist()


def _gemma_scalar(raw: dict) -> None:
    """query_pre_attn_scalar, which llama.cpp never writes: it scales Gemma 2 and 3 queries by 1/sqrt(d // tau) in
    the 27B models (known by their layer count; Gemma 2 27B: 4608 // 32 = 144, Gemma 3 27B: 5376 // 32 = 168) and
    by 1/sqrt(head_dim) in the others (src/llama-model.cpp, f_attention_scale), as qkv does without the key."""
    d, tau = raw.get("hidden_size"), raw.get("num_attention_heads")
    if raw.get("num_hidden_layers") == GEMMA_27B_LAYERS[raw["model_type"]] and type(d) is int and type(tau) is int:
        if 0 < tau <= d:
            raw["query_pre_attn_scalar"] = d // tau


def _neox_config(raw: dict, meta: dict, tensors: dict, where: str) -> None:
    """GPT-NeoX's keys: llama.cpp writes the rotary dimensions (not the fraction), and no bias flag or base by name
    (llama.cpp runs a file without rope.freq_base at 10000, as qkv does; without rope.dimension_count, fully)."""
    arch = meta["general.architecture"]
    d, tau = raw.get("hidden_size"), raw.get("num_attention_heads")
    if type(d) is int and type(tau) is int and 0 < tau <= d and d % tau == 0:
        rot = meta.get(f"{arch}.rope.dimension_count", d // tau)
        if type(rot) is not int or not 2 <= rot <= d // tau or rot % 2:
            raise QkvError(f"{where}: {arch}.rope.dimension_count is {shown(rot)}: expected an even number of "
                           f"dimensions from 2 to the head width {d // tau}")  # fmt: skip
        raw["rotary_pct"] = (rot + 0.5) / (d // tau)  # int(d_k * pct) is rot again (rot / d_k can round below it)
    if "rope_theta" in raw:
        raw["rotary_emb_base"] = raw.pop("rope_theta")
    raw["attention_bias"] = "blk.0.attn_qkv.bias" in tensors


def hf_name(name: str, kind: str = "llama", arch: str | None = None) -> str | None:
    """The Hugging Face name of a GGUF tensor name in a model of type `kind` (from a file of architecture `arch`),
    or None for one the forward pass does not use."""
    neox = kind == "gpt_neox"
    globals_, layers = (NEOX_GLOBAL_NAMES, NEOX_LAYER_NAMES) if neox else (GLOBAL_NAMES, LAYER_NAMES)
    if arch in OWN_MODULES:  # its own names: MLA's projections, Phi-3's fused attn_qkv and ffn_up ...
        layers = {**LAYER_NAMES, **getattr(own_module(arch), "LAYER_NAMES", {})}
    stem, _, suffix = name.rpartition(".")
    if stem in globals_:
        return f"{globals_[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in layers:
        return f"{'gpt_neox' if neox else 'model'}.layers.{int(parts[1])}.{layers[parts[2]]}.{suffix}"
    return None


def unpermute(rows, n_head: int):  # [rows, ...] -> [rows, ...]: ggml's pair order back to halves, per head
    dim = rows.shape[0] // n_head // 2
    return rows.reshape(n_head, dim, 2, *rows.shape[1:]).swapaxes(2, 1).reshape(rows.shape)


def per_head(rows, n_head: int):  # [3 tau d_k, ...] -> same shape: [Q | K | V] back to [q_h | k_h | v_h] per head
    return rows.reshape(3, n_head, rows.shape[0] // 3 // n_head, *rows.shape[1:]).swapaxes(0, 1).reshape(rows.shape)


def hf_tensors(meta: dict, tensors: dict[str, Tensor], raw_config: dict) -> dict[str, Tensor]:
    """The tensors under Hugging Face names; reading one undoes the converter's changes (lazily, on read)."""
    kind, arch = raw_config["model_type"], meta.get("general.architecture")
    heads = {"attn_q": raw_config.get("num_attention_heads"), "attn_k": raw_config.get("num_key_value_heads")}
    out: dict[str, Tensor] = {}
    for name, t in tensors.items():
        if (experts := gguf_experts.hf_tensors(name, t, kind)) is not None:
            out.update(experts)
            continue
        target = hf_name(name, kind, arch)
        if target is None:
            continue
        if kind in ("gemma2", "gemma3_text") and target.endswith("norm.weight"):  # stored as 1 + w
            read, order = _shifted(t.read), False
        elif kind in ("llama", "mistral", "mixtral", "smollm3") and name.split(".")[-2] in heads:
            n_head = heads[name.split(".")[-2]]
            if not isinstance(n_head, int) or n_head < 1 or t.shape[0] % (2 * n_head):
                raise QkvError(f"GGUF tensor {name!r} has {t.shape[0]} rows: not a whole number of pairs per head")
            read, order = _unpermuted(t.read, n_head), unpermute(np.arange(t.shape[0]), n_head)
        elif kind == "gpt_neox" and name.split(".")[-2] == "attn_qkv":
            n_head = raw_config.get("num_attention_heads")
            if not isinstance(n_head, int) or n_head < 1 or t.shape[0] % (3 * n_head):
                raise QkvError(f"GGUF tensor {name!r} has {t.shape[0]} rows: not q, k and v rows for each head")
            read, order = _regrouped(t.read, n_head), per_head(np.arange(t.shape[0]), n_head)
        else:
            read, order = t.read, None
        if kind in ("gemma2", "gemma3_text") and name.startswith("blk.") and ".ffn_norm." in name:
            target = target.replace("post_attention_layernorm", "pre_feedforward_layernorm")
        out[target] = Tensor(t.shape, t.kind, read, t.source, t.rows if read is t.read else None, _into(t, order))
    if kind == "gpt_oss":  # sinks, router and experts (gguf_gpt_oss)
        from qkv_cli.models.formats.gguf.gpt_oss import gpt_oss_tensors

        out.update(gpt_oss_tensors(tensors))
    if arch in OWN_MODULES:  # DeepSeek's kv_b_proj joined, Phi-3's q, k, v apart joined, Llama 4's experts ...
        return own_module(arch).tensors(out, tensors, raw_config)
    return out


def _into(t: Tensor, order):
    """What fills a reused array with the tensor as read: the stored tensor's `into` (order None), its rows in
    `order` (a permutation of a matrix's rows, applied to the stored blocks), or none (order False: the values
    change; a vector's order: it would move values within blocks)."""
    if t.into is None or order is False or (order is not None and len(t.shape) != 2):
        return None
    return t.into if order is None else partial(t.into, order=order)


def _shifted(read):
    return lambda: read() - 1


def _unpermuted(read, n_head):
    return lambda: unpermute(read(), n_head)


def _regrouped(read, n_head):
    return lambda: per_head(read(), n_head)
