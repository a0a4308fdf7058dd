"""DeepSeek-V2: DeepSeek-V3's layers (deepseek_v3.py, models.layers.mla) with its own router. RoPE always turns
interleaved pairs (transformers multiplies them as complex numbers), and the MoE layers' router is a softmax: the
k largest scores (`topk_method` "greedy"), or the k largest within the `topk_group` best of `n_group` groups
("group_limited_greedy"), times routed_scaling_factor, never renormalised; no correction bias."""

from __future__ import annotations

from dataclasses import replace

from qkv_cli.errors import QkvError
from qkv_cli.models.families import deepseek_v3
from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.deepseek_v3 import SPEC as SPEC

BASE = decoder  # everything else: the shared RoPE decoder (with MLA and its mixture of experts)
MODEL_TYPE = "deepseek_v2"
PREFIXES = ("model.", "")
ROUTERS = {"greedy": "softmax_topk", "group_limited_greedy": "softmax_groups"}  # topk_method -> layers.moe router


def read_config(keys) -> dict:
    method = keys.str("topk_method", "greedy")
    if method not in ROUTERS:
        raise QkvError(f"{keys.where}: 'topk_method' {method!r} is not supported: use one of {', '.join(ROUTERS)}")
    moe = replace(deepseek_v3.MOE, router=ROUTERS[method], normalise=False, correction=False)
    return deepseek_v3.read(keys, True, moe)
