"""The family registry: model_type -> the module that implements it. A new family is one module and one entry.

A family module provides (see bert.py for the simplest, decoder.py for the shared RoPE decoder):
    MODEL_TYPE                      the config.json model_type
    read_config(keys) -> dict       the ModelConfig fields it reads from config.json (through config.Keys)
    tensor_shapes(c) -> dict        every checkpoint tensor the forward pass reads (Hugging Face names) -> shape
    PREFIXES                        prefixes a checkpoint may put before those names
    prepare(tensors, c, dtype)      the weights as the forward pass uses them (.blocks[l].attn: AttentionWeights)
    parameter_table(c)              every learned matrix with its shape and count, in the notation
    layer_mask(c, layer)            the core.masks.MaskSpec of a layer (causal, and a window on sliding layers)
    layer_type(c, layer)            "" or e.g. "sliding_attention" / "full_attention"
    hooks(c, layer)                 the attention.Hooks of a layer: scale, RoPE, QK-norm, soft-capping
    embed(p, c, ids, start), block(p, c, layer, x, mask, kernel, cache, start, values, into), final(p, c, x)
                                    the forward pass (a KV cache holds earlier tokens' keys and values; start:
                                    their count; values: a change to V; into: a zero-filled array for the weights)
    logits(p, c, h)                 next-token scores from the final hidden state, or None (an encoder)
    masked_lm(p, c, h)              optional, an encoder's: the masked-LM scores at every position, or None
    optional_tensors(c)             optional: tensors outside the forward pass read when the checkpoint holds them
    ATTENTION_INPUT                 what H is for the attention of a layer, in words
  optional:
    STREAMED, fixed_keys(c)         prepare builds formats.stream.Layers (each layer read when the pass reaches it);
                                    fixed_keys: the tensors read at load and always held (the final norm)
"""

from __future__ import annotations

import importlib
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.config import GGUF_ONLY, MAX_CONFIG_BYTES, Keys, ModelConfig, Param, token_ids

FAMILIES = {
    "bert": "qkv_cli.models.families.bert",
    "gpt2": "qkv_cli.models.families.gpt2",
    "llama": "qkv_cli.models.families.llama",
    "mistral": "qkv_cli.models.families.mistral",
    "qwen2": "qkv_cli.models.families.qwen2",
    "qwen3": "qkv_cli.models.families.qwen3",
    "gemma2": "qkv_cli.models.families.gemma2",
    "gemma3_text": "qkv_cli.models.families.gemma3",
    "gpt_neox": "qkv_cli.models.families.gpt_neox",
    "olmo2": "qkv_cli.models.families.olmo2",
    "smollm3": "qkv_cli.models.families.smollm3",
    "phi3": "qkv_cli.models.families.phi3",
    "gpt_oss": "qkv_cli.models.families.gpt_oss",
    "mixtral": "qkv_cli.models.families.mixtral",  # mixtures of experts (models.layers.moe)
    "qwen3_moe": "qkv_cli.models.families.qwen3_moe",
    "olmoe": "qkv_cli.models.families.olmoe",
    "deepseek_v3": "qkv_cli.models.families.deepseek_v3",
    "deepseek_v2": "qkv_cli.models.families.deepseek_v2",
    "llama4_text": "qkv_cli.models.families.llama4",
    "t5": "qkv_cli.models.families.encdec.t5",  # encoder-decoders (models.layers.encdec)
    "mt5": "qkv_cli.models.families.encdec.t5",  # T5 v1.1 on a multilingual vocabulary: T5's layers and keys
    "umt5": "qkv_cli.models.families.encdec.t5",  # a relative position bias per layer (t5 reads it by model_type)
    "bart": "qkv_cli.models.families.encdec.bart",
    "marian": "qkv_cli.models.families.encdec.marian",
}

ENCDEC = "qkv_cli.models.layers.encdec"  # the BASE of every encoder-decoder family

PROTOCOL = (
    "MODEL_TYPE",
    "read_config",
    "tensor_shapes",
    "PREFIXES",
    "prepare",
    "parameter_table",
    "layer_mask",
    "layer_type",
    "hooks",
    "embed",
    "block",
    "final",
    "logits",
    "ATTENTION_INPUT",
    "HEAD",
    "layer_extras",
    "STREAMED",
    "fixed_keys",
    "masked_lm",
    "optional_tensors",
)
# a family may lack these (an encoder has no head; BERT is not streamed; only BERT has a masked-LM head)
OPTIONAL = ("HEAD", "STREAMED", "fixed_keys", "masked_lm", "optional_tensors")


class Family:
    """A family module with what it does not define taken from its BASE module (the shared RoPE decoder), resolved
    once: `inherited` names what came from BASE; anything outside PROTOCOL is the module's own attribute."""

    def __init__(self, module, model_type: str | None = None):
        """model_type: the registry's key, where one module serves several (mT5 and UMT5 are read by t5's)."""
        self.module = module
        base = getattr(module, "BASE", None)
        self.inherited = tuple(n for n in PROTOCOL if not hasattr(module, n) and hasattr(base, n))
        for name in PROTOCOL:
            source = base if name in self.inherited else module
            if hasattr(source, name):
                setattr(self, name, getattr(source, name))
        if model_type is not None:
            self.MODEL_TYPE = model_type

    def __getattr__(self, name):  # only for names outside PROTOCOL (a family's own extras)
        if name != "module" and hasattr(self.module, name):
            return getattr(self.module, name)
        raise AttributeError(f"model family {self.module.__name__} has no {name!r}")

    def __repr__(self) -> str:
        return f"Family({self.MODEL_TYPE!r})"

    @property
    def is_encoder_decoder(self) -> bool:
        """Built on the shared encoder-decoder layers (models.layers.encdec): an encoder, a decoder and the
        cross-attention between them, run by models.encdec_model instead of the decoder protocol above."""
        return getattr(getattr(self.module, "BASE", None), "__name__", "") == ENCDEC


def family_for(model_type, where: str = "config.json"):
    """The family module for a model_type; an unknown one lists the known ones."""
    known = ", ".join(FAMILIES)
    if model_type is None:
        raise QkvError(f"{where} has no 'model_type': supported are {known}")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        shown = model_type if isinstance(model_type, str) else type(model_type).__name__
        raise QkvError(f"{where}: model_type {shown!r} is not supported: supported are {known}")
    return Family(importlib.import_module(FAMILIES[model_type]), model_type)


def encoder_decoders() -> set[str]:
    """The model_types built on the shared encoder-decoder (Family.is_encoder_decoder)."""
    return {t for t in FAMILIES if family_for(t).is_encoder_decoder}


def config_from_dict(raw: dict, name: str = "") -> ModelConfig:
    """Map a Hugging Face config.json dict onto ModelConfig through its family; QkvError names what is wrong."""
    where = f"config.json of {name}" if name else "config.json"
    if not isinstance(raw, dict):
        raise QkvError(f"{where} must hold a JSON object, got {type(raw).__name__}")
    family = family_for(raw.get("model_type"), where)
    fields = family.read_config(Keys(raw, where, family.MODEL_TYPE))
    fields["eos"] = token_ids(raw.get("eos_token_id"))
    return ModelConfig(family=family.MODEL_TYPE, name=name, **fields)


def read_config(folder: str | Path, name: str = "") -> ModelConfig:
    """ModelConfig from folder/config.json; QkvError if it is missing, not JSON, or lacks a key."""
    from qkv_cli.files import read_json

    path = Path(folder) / "config.json"
    raw = read_json(path, MAX_CONFIG_BYTES, missing=f"no config.json in '{folder}': a model folder needs "
                    "config.json, model.safetensors and tokenizer.json")  # fmt: skip
    if isinstance(raw, dict):
        raw.pop(GGUF_ONLY, None)
    return config_from_dict(raw, name or Path(folder).name)


def parameter_table(config: ModelConfig) -> list[Param]:
    """Every learned matrix of the checkpoint, as its family lists it."""
    return family_for(config.family).parameter_table(config)


def parameter_count(config: ModelConfig) -> int:
    return sum(p.params for p in parameter_table(config))
