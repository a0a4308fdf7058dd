"""DeepSeek-V2: DeepSeek-V3's layers (deepseek_v3.py, models.mla) with its own router. RoPE always turns
interleaved pairs (transformers multiplies them as complex numbers), and the MoE layers' router is a softmax: the
k largest scores (`topk_method` "greedy"), or the k largest within the `topk_group` best of `n_group` groups
("group_limited_greedy"), times routed_scaling_factor, never renormalised; no correction bias."""

from __future__ import annotations

from qkv_cli.errors import QkvError
from qkv_cli.models import decoder, deepseek_v3
from qkv_cli.models.deepseek_v3 import SPEC as SPEC
from qkv_cli.models.deepseek_v3 import block as block
from qkv_cli.models.deepseek_v3 import fixed_keys as fixed_keys
from qkv_cli.models.deepseek_v3 import parameter_table as parameter_table
from qkv_cli.models.deepseek_v3 import prepare as prepare
from qkv_cli.models.deepseek_v3 import tensor_shapes as tensor_shapes

BASE = decoder  # everything else: the shared RoPE decoder (with MLA); the MoE layers are DeepSeek-V3's, above
MODEL_TYPE = "deepseek_v2"
PREFIXES = ("model.", "")
ROUTERS = {"greedy": "softmax_topk", "group_limited_greedy": "softmax_groups"}  # topk_method -> models.moe router


def read_config(keys) -> dict:
    method = keys.str("topk_method", "greedy")
    if method not in ROUTERS:
        raise QkvError(f"{keys.where}: 'topk_method' {method!r} is not supported: use one of {', '.join(ROUTERS)}")
    return deepseek_v3.read(keys, True, ROUTERS[method])
