"""Tiny checkpoints written with NumPy + safetensors + tokenizers (no PyTorch): BERT, GPT-2 and every RoPE decoder
family (random weights; their agreement with transformers is tests/models/test_decoders_reference.py's job)."""

from __future__ import annotations

import json

import numpy as np

FAMILIES = ("bert", "gpt2")
WORDS = "the cat sat on mat a dog ran far and then it slept . , !".split()
TINY = {"d": 16, "tau": 4, "L": 2, "d_ff": 24, "P": 12}


# --- tiny checkpoints -----------------------------------------------------------------------------------


def write_tokenizer(folder, family):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials = ["[UNK]", "[CLS]", "[SEP]"] if family == "bert" else ["[UNK]"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if family == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
        )
    tok.save(str(folder / "tokenizer.json"))
    return len(vocab)


_DECODER = {"hidden_size": TINY["d"], "num_attention_heads": TINY["tau"], "num_key_value_heads": 2,
            "num_hidden_layers": TINY["L"], "intermediate_size": TINY["d_ff"],
            "max_position_embeddings": 32}  # fmt: skip
_WINDOW = {"sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"]}
DECODERS = {  # model_type -> what it adds to _DECODER: windows shorter than the text, every family's own keys
    "llama": {},
    "mistral": {"sliding_window": 3},
    "qwen2": {"use_sliding_window": True, **_WINDOW},
    "qwen3": {"head_dim": 8},
    "gemma2": {
        "head_dim": 8,
        "query_pre_attn_scalar": 6,
        "attn_logit_softcapping": 5.0,
        "final_logit_softcapping": 30.0,
        **_WINDOW,
    },  # fmt: skip
    "gemma3_text": {"head_dim": 8, "query_pre_attn_scalar": 8, "rope_local_base_freq": 100.0, **_WINDOW},
    "gpt_neox": {"rotary_pct": 0.5, "use_parallel_residual": True, "layer_norm_eps": 1e-5},
    "olmo2": {},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},  # mixtures of experts
    "qwen3_moe": {"head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 12,
                  "norm_topk_prob": True, "mlp_only_layers": [1]},
    "olmoe": {"num_experts": 4, "num_experts_per_tok": 2},
}  # fmt: skip


def tiny_config(family, vocab_size):
    if family in DECODERS:
        return {"model_type": family, **_DECODER, "vocab_size": vocab_size, **DECODERS[family]}
    if family == "bert":
        return {
            "model_type": "bert",
            "hidden_size": TINY["d"],
            "num_attention_heads": TINY["tau"],
            "num_hidden_layers": TINY["L"],
            "intermediate_size": TINY["d_ff"],
            "vocab_size": vocab_size,
            "max_position_embeddings": TINY["P"],
            "type_vocab_size": 2,
            "layer_norm_eps": 1e-12,
            "hidden_act": "gelu",
        }
    return {
        "model_type": "gpt2",
        "n_embd": TINY["d"],
        "n_head": TINY["tau"],
        "n_layer": TINY["L"],
        "n_inner": TINY["d_ff"],
        "vocab_size": vocab_size,
        "n_positions": TINY["P"],
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
    }


def tiny_tensors(family, cfg, seed=0):
    from qkv_cli.models.families.registry import config_from_dict, family_for

    rng = np.random.default_rng(seed)
    shapes = family_for(family).tensor_shapes(config_from_dict(cfg))
    out = {}
    for name, shape in shapes.items():
        if name.endswith(("norm.weight", "LayerNorm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
            out[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return out


def make_checkpoint(folder, family="bert", prefix="", config_overrides=None, tensor_edit=None, seed=0):
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(folder, family)
    cfg = tiny_config(family, vocab_size)
    cfg.update(config_overrides or {})
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = {prefix + k: v for k, v in tiny_tensors(family, tiny_config(family, vocab_size), seed).items()}
    if family == "bert":
        tensors[prefix + "embeddings.position_ids"] = np.arange(TINY["P"], dtype=np.int64)[None]
        tensors[prefix + "pooler.dense.weight"] = np.zeros((TINY["d"], TINY["d"]), np.float32)
    elif family == "gpt2":
        tensors[prefix + "h.0.attn.bias"] = np.tril(np.ones((1, 1, TINY["P"], TINY["P"]), np.float32))
    if tensor_edit is not None:
        tensor_edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder
