"""DeepSeek-V3 (and the same layers in DeepSeek-V2's files): Llama's block with multi-head latent attention
(models.layers.mla) and, after the first `first_k_dense_replace` layers, a mixture of experts with shared experts.

    Att: MLA: queries through the latent c^Q (q_lora_rank), keys and values decompressed from the latent c^KV
         (kv_lora_rank), a RoPE key of qk_rope_head_dim shared by every head; q . k over qk_nope + qk_rope
         dimensions, values of v_head_dim; scale (qk_nope + qk_rope)^-1/2, times mscale^2 under YaRN
         (rope_scaling's mscale_all_dim)
    MLP: W_down (silu(W_gate x) * W_up x) on the first first_k_dense_replace layers, DeepSeekMoE after them:
         the shared decoder's mixture of experts (models.layers.moe) with a sigmoid router whose correction bias steers
         the group-limited choice, weights times routed_scaling_factor, and shared experts (models.families.decoder.moe)

config.json's `head_dim` is qk_rope_head_dim (the width RoPE turns), as transformers' DeepseekV3Config sets it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from qkv_cli.errors import QkvError
from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config
from qkv_cli.models.families.decoder.moe import MoeKeys
from qkv_cli.models.formats.config import Keys

BASE = decoder  # everything else: the shared RoPE decoder, its mixture of experts included
MODEL_TYPE = "deepseek_v3"
PREFIXES = ("model.", "")
MOE = MoeKeys(experts=("n_routed_experts",), top_k=("num_experts_per_tok",), d_expert=("moe_intermediate_size",),
              normalise=("norm_topk_prob", True), router="sigmoid_groups", names="deepseek", shared="n_shared_experts",
              scaling="routed_scaling_factor", groups=True, first_dense="first_k_dense_replace", correction=True,
              optional=True)  # fmt: skip
SPEC = decoder_config.Spec(moe=MOE)


def read_config(keys) -> dict:
    return read(keys, keys.get("rope_interleave", True), MOE)


def read(keys, interleaved, moe: MoeKeys) -> dict:
    """The ModelConfig fields: the shared decoder's, with MLA's widths (models.layers.mla.Latent) and its scale, and the
    MoE layers' options as `moe` names them."""
    from qkv_cli.models.layers.mla import Latent

    with keys.located():
        latent = Latent(
            q_rank=keys.int("q_lora_rank", None),
            kv_rank=keys.int("kv_lora_rank"),
            d_nope=keys.int("qk_nope_head_dim"),
            d_rope=keys.int("qk_rope_head_dim"),
            d_v=keys.int("v_head_dim"),
            interleaved=interleaved,
        )
    check_widths(keys, latent)
    tau = keys.int("num_attention_heads")
    G = keys.int("num_key_value_heads", tau)
    if G != tau:
        raise QkvError(f"{keys.where}: 'num_key_value_heads' ({G}) must equal 'num_attention_heads' ({tau}): "
                       "multi-head latent attention decompresses keys and values for every head")  # fmt: skip
    rope_keys = Keys(dict(keys.raw, head_dim=latent.d_rope), keys.where, keys.family)  # RoPE turns d_rope dims
    fields = decoder_config.read(rope_keys, replace(SPEC, moe=moe))
    rope = fields["rope"].ropes[""]
    scale = latent.d_k**-0.5
    if rope.kind != "default" and rope.mscale_all_dim:  # YaRN: the softmax is sharpened by mscale^2
        scale *= mscale(rope.factor, rope.mscale_all_dim) ** 2
    fields["attention"] = replace(fields["attention"], scale=scale)
    fields["head_dim"] = latent.d_k
    fields["latent"] = latent
    return fields


def mscale(factor: float, m: float) -> float:  # YaRN's attention temperature: 0.1 m ln(factor) + 1
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def check_widths(keys, latent) -> None:
    """Widths config.json also states must agree with MLA's: qk_head_dim, and head_dim (the RoPE width)."""
    for key, want in (("qk_head_dim", latent.d_k), ("head_dim", latent.d_rope)):
        given = keys.int(key, None)
        if given is not None and given != want:
            raise QkvError(f"{keys.where}: '{key}' is {given} but the MLA widths make it {want} "
                           "(qk_nope_head_dim + qk_rope_head_dim; head_dim is qk_rope_head_dim)")  # fmt: skip
