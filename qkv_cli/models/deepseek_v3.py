"""DeepSeek-V3 (and the same layers in DeepSeek-V2's files): Llama's block with multi-head latent attention
(models.mla) and, after the first `first_k_dense_replace` layers, a mixture of experts with shared experts.

    Att: MLA: queries through the latent c^Q (q_lora_rank), keys and values decompressed from the latent c^KV
         (kv_lora_rank), a RoPE key of qk_rope_head_dim shared by every head; q . k over qk_nope + qk_rope
         dimensions, values of v_head_dim; scale (qk_nope + qk_rope)^-1/2, times mscale^2 under YaRN
         (rope_scaling's mscale_all_dim)
    MLP: W_down (silu(W_gate x) * W_up x) on the first first_k_dense_replace layers, DeepSeekMoE after them
         (routed experts chosen by a sigmoid router, and shared experts: models.deepseek_moe)

config.json's `head_dim` is qk_rope_head_dim (the width RoPE turns), as transformers' DeepseekV3Config sets it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from qkv_cli.errors import QkvError
from qkv_cli.models import decoder, decoder_config, deepseek_moe
from qkv_cli.models.config import Keys, ModelConfig, Param
from qkv_cli.models.decoder_names import tensor_names as decoder_tensor_names

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "deepseek_v3"
PREFIXES = ("model.", "")
SPEC = decoder_config.Spec()


def read_config(keys) -> dict:
    return read(keys, keys.get("rope_interleave", True), "sigmoid_groups")


def read(keys, interleaved, router: str) -> dict:
    """The ModelConfig fields: the shared decoder's, with MLA's widths (models.mla.Latent) and its scale, and the
    MoE layers' options (router: a models.moe.ROUTERS kind)."""
    from qkv_cli.models.mla import Latent

    try:
        latent = Latent(
            q_rank=keys.int("q_lora_rank", None),
            kv_rank=keys.int("kv_lora_rank"),
            d_nope=keys.int("qk_nope_head_dim"),
            d_rope=keys.int("qk_rope_head_dim"),
            d_v=keys.int("v_head_dim"),
            interleaved=interleaved,
        )
    except QkvError as exc:
        message = str(exc)
        raise QkvError(message if message.startswith(keys.where) else f"{keys.where}: {message}") from None
    check_widths(keys, latent)
    tau = keys.int("num_attention_heads")
    G = keys.int("num_key_value_heads", tau)
    if G != tau:
        raise QkvError(f"{keys.where}: 'num_key_value_heads' ({G}) must equal 'num_attention_heads' ({tau}): "
                       "multi-head latent attention decompresses keys and values for every head")  # fmt: skip
    try:
        moe = deepseek_moe.options(keys, keys.int("num_hidden_layers"), router)
    except QkvError as exc:
        message = str(exc)
        raise QkvError(message if message.startswith(keys.where) else f"{keys.where}: {message}") from None
    rope_keys = Keys(dict(keys.raw, head_dim=latent.d_rope), keys.where, keys.family)  # RoPE turns d_rope dims
    fields = decoder_config.read(rope_keys, SPEC)
    rope = fields["rope"].ropes[""]
    scale = latent.d_k**-0.5
    if rope.kind != "default" and rope.mscale_all_dim:  # YaRN: the softmax is sharpened by mscale^2
        scale *= mscale(rope.factor, rope.mscale_all_dim) ** 2
    fields["attention"] = replace(fields["attention"], scale=scale)
    fields["head_dim"] = latent.d_k
    fields["latent"] = latent
    fields["moe"] = moe
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


def tensor_names(c: ModelConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """The shared decoder's names (MLA included), with a MoE layer's MLP in place of the dense one."""
    out = decoder_tensor_names(c)
    for l in range(c.n_layers):
        if deepseek_moe.is_moe(c, l):
            for module in ("gate_proj", "up_proj", "down_proj"):
                del out[f"layers.{l}.mlp.{module}.weight"]
            out.update(deepseek_moe.tensor_names(c, f"layers.{l}.", f"{l}."))
    return out


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    return {name: shape for name, (shape, _) in tensor_names(c).items()}


def fixed_keys(c: ModelConfig) -> list[str]:
    return [n for n, (_, role) in tensor_names(c).items() if role.startswith("final")]


def parameter_table(c: ModelConfig) -> list[Param]:
    table = decoder.parameter_table(c)
    return table if c.moe is None else deepseek_moe.parameter_table(c, table)


def prepare(w, c: ModelConfig, dtype) -> decoder.Params:
    """As the shared decoder: each layer's block built on first use (models.stream), a MoE layer's experts too."""
    return decoder.prepare(w, c, dtype, tensor_names(c), prepare_block)


def prepare_block(w, c: ModelConfig, names: dict, l: int):
    """The shared decoder's block; on a MoE layer its MLP is a deepseek_moe.MoeLayer (Block.moe)."""
    from qkv_cli.models.layers import ACTIVATIONS

    if not deepseek_moe.is_moe(c, l):
        return decoder.prepare_block(w, c, names, l)
    b = decoder.prepare_block(w, c, names, l)  # the MLP's roles are absent: up, down hold None
    b.up = b.gate = b.down = None
    b.moe = deepseek_moe.weights(lambda role: w(names[role]), c, l, ACTIVATIONS[c.activation])
    return b


def block(p, c: ModelConfig, layer: int, x, mask, kernel, cache=None, start=0, values=None, into=None, rows=None):
    """h = x + MLA(N_1(x)); x' = h + MLP(N_2(h)), the MLP dense or DeepSeekMoE; as decoder.block for the arguments."""
    from qkv_cli.models.mla import latent_attention

    b = p.blocks[layer]
    if b.moe is None:
        return decoder.block(p, c, layer, x, mask, kernel, cache, start, values, into, rows)
    h = decoder.hooks(c, layer, b, x.shape[0], x.dtype, start)._replace(values=values)
    parts = latent_attention(b.norms["attn_in"](x), b.attn, h, mask, kernel, cache, into, rows)
    h = x + parts.output
    f, routing = b.moe(b.norms["mlp_in"](h))
    return h + f, parts._replace(routing=routing)  # the chosen experts go out with the layer's parts
