"""llama.cpp's `llama4` GGUF files (Llama 4 Scout and Maverick, Llama4Model in convert_hf_to_gguf.py) as Hugging
Face's llama4_text checkpoints.

What the file says, and what llama.cpp fixes without a key (src/models/llama4.cpp, load_arch_hparams):
- feed_forward_length is the dense layers' width (Llama4Model writes intermediate_size_mlp there),
  expert_feed_forward_length the width of every expert and of the shared expert (Hugging Face's intermediate_size);
- layer l is a MoE layer iff interleave_moe_layer_step > 0 and (l + 1) is a multiple of it (a key llama.cpp
  requires), as Hugging Face's moe_layers; the router is a sigmoid of the top-k logits applied to the expert input;
- the chunk is 8192 tokens whatever the file says (attention.sliding_window 0 alone, every layer full attention,
  changes it: refused here); layer l is chunked iff l % p < p - 1 (p = attention.sliding_window_pattern, 4 when
  absent), has no RoPE iff (l + 1) is a multiple of 4, and a NoPE layer's query is scaled by
  log(floor((pos + 1) / 8192) + 1) 0.1 + 1 (floor_scale 8192, attn_scale 0.1, no key for either);
- the weightless QK-norm after RoPE is on unless the file has 128 experts (llama.cpp's LLM_TYPE_17B_128E:
  Maverick, whose config says use_qk_norm false), its epsilon the RMSNorm's.
The converter permutes no q or k rows (undo_permute = False): llama.cpp's rope for llama4 is the normal one, of
adjacent pairs, which is Llama 4's own, so the rows are Hugging Face's and the family reorders them as it does
for a Hugging Face folder (models.families.llama4.PairsToHalves). The experts are stacked per projection, gate_up_proj
split into ffn_gate_exps and ffn_up_exps ([E, d_e, d] each) and down_proj transposed (ffn_down_exps [E, d, d_e]);
they are put back as transformers keeps them (gate_up_proj [E, d, 2 d_e], down_proj [E, d_e, d]).
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.gguf.header import shown
from qkv_cli.models.formats.safetensors import Tensor

CHUNK, FLOOR_SCALE, ATTN_SCALE = 8192, 8192, 0.1  # llama.cpp's values for every llama4 file
NOPE_STEP, PATTERN = 4, 4  # llama-hparams.h's n_no_rope_layer_step; the default chunked pattern (3 chunked, 1 full)
MAVERICK_EXPERTS = 128  # llama.cpp turns the QK-norm off for this type alone
SHARED = {"ffn_gate_shexp": "gate_proj", "ffn_up_shexp": "up_proj", "ffn_down_shexp": "down_proj"}


def config(raw: dict, meta: dict, tensors: dict, where: str) -> None:
    """Fill raw (config.json keys, the generic ones already read) with what llama.cpp reads or fixes for llama4."""
    a = "llama4."

    def need(key: str, least: int) -> int:
        value = meta.get(a + key)
        if type(value) is not int or value < least:
            raise QkvError(f"{where}: {a}{key} is {shown(value)}: llama.cpp needs an integer of at least {least}")
        return value

    window = meta.get(a + "attention.sliding_window")
    if window is not None and type(window) is not int:
        raise QkvError(f"{where}: {a}attention.sliding_window is {shown(window)}: expected an integer")
    if window == 0:
        raise QkvError(f"{where}: {a}attention.sliding_window 0 (every layer full attention, as MobileLLM-R1) is "
                       "not supported: qkv reads llama4 files chunked at 8192, as llama.cpp runs Llama 4")  # fmt: skip
    step, experts = need("interleave_moe_layer_step", 0), need("expert_count", 1)
    width, used = need("expert_feed_forward_length", 1), need("expert_used_count", 1)
    pattern = meta.get(a + "attention.sliding_window_pattern", PATTERN)
    if type(pattern) is not int or pattern < 0:
        raise QkvError(f"{where}: {a}attention.sliding_window_pattern must be one period (an integer of at least "
                       f"0), got {shown(pattern)}")  # fmt: skip
    rot, swa_base = meta.get(a + "rope.dimension_count"), meta.get(a + "rope.freq_base_swa")
    if rot is not None and (type(rot) is not int or rot != raw.get("head_dim", rot)):
        raise QkvError(f"{where}: {a}rope.dimension_count is {shown(rot)}, not the head width "
                       f"{shown(raw.get('head_dim'))}: llama.cpp turns whole heads")  # fmt: skip
    if rot is not None and "head_dim" not in raw:
        raw["head_dim"] = rot
    theta = raw.get("rope_theta")
    if swa_base is not None and (type(swa_base) not in (int, float) or swa_base != theta):
        raise QkvError(f"{where}: {a}rope.freq_base_swa is {shown(swa_base)}: a RoPE base of the chunked layers "
                       f"other than rope.freq_base ({shown(theta)}) is not supported")  # fmt: skip
    if "intermediate_size" in raw:  # the dense width
        raw["intermediate_size_mlp"] = raw.pop("intermediate_size")
    raw.pop("moe_intermediate_size", None)
    raw.update({
        "intermediate_size": width, "num_local_experts": experts, "num_experts_per_tok": used,
        "interleave_moe_layer_step": max(step, 1), "attention_chunk_size": CHUNK, "floor_scale": FLOOR_SCALE,
        "attn_scale": ATTN_SCALE, "attn_temperature_tuning": True, "use_qk_norm": experts != MAVERICK_EXPERTS,
    })  # fmt: skip
    if step == 0:  # llama.cpp: no MoE layer
        raw["moe_layers"] = []
    n = raw.get("num_hidden_layers")
    if type(n) is int and 0 < n <= 100_000:  # else read_config names the problem
        raw["no_rope_layers"] = [int((l + 1) % NOPE_STEP != 0) for l in range(n)]
        chunked = [pattern == 0 or l % pattern < pattern - 1 for l in range(n)]  # llama_hparams::set_swa_pattern
        raw["layer_types"] = ["chunked_attention" if c else "full_attention" for c in chunked]


def tensors(out: dict[str, Tensor], gguf: dict[str, Tensor], raw: dict) -> dict[str, Tensor]:
    """out (the generic names) with the dense MLP under feed_forward, and each MoE layer's router, experts and
    shared expert under Hugging Face's names."""
    for name in [n for n in out if ".mlp." in n]:
        out[name.replace(".mlp.", ".feed_forward.")] = out.pop(name)
    layers = sorted({int(n.split(".")[1]) for n in gguf if n.startswith("blk.") and n.split(".")[1].isdigit()})
    for l in layers:
        p, hf = f"blk.{l}.", f"model.layers.{l}.feed_forward."
        if p + "ffn_gate_inp.weight" in gguf:
            out[hf + "router.weight"] = gguf[p + "ffn_gate_inp.weight"]
        for stem, target in SHARED.items():
            if p + stem + ".weight" in gguf:
                out[f"{hf}shared_expert.{target}.weight"] = gguf[p + stem + ".weight"]
        gate, up, down = (gguf.get(f"{p}ffn_{x}_exps.weight") for x in ("gate", "up", "down"))
        if gate is None and up is None and down is None:
            continue
        if (
            gate is None
            or up is None
            or down is None
            or len(gate.shape) != 3
            or gate.shape != up.shape
            or tuple(down.shape) != (gate.shape[0], gate.shape[2], gate.shape[1])
        ):
            shapes = [None if t is None else list(t.shape) for t in (gate, up, down)]
            raise QkvError(f"GGUF layer {l}: ffn_gate_exps, ffn_up_exps and ffn_down_exps are {shapes}: expected "
                           "[E, d_e, d], [E, d_e, d] and [E, d, d_e]")  # fmt: skip
        E, de, d = gate.shape
        out[hf + "experts.gate_up_proj"] = Tensor((E, d, 2 * de), gate.kind, _gate_up(gate.read, up.read), gate.source)
        out[hf + "experts.down_proj"] = Tensor((E, de, d), down.kind, _transposed(down.read), down.source)
    return out


def _gate_up(gate, up):  # -> [E, d, 2 d_e]: [gate | up] along the last axis, each the file's [E, d_e, d] transposed
    return lambda: np.concatenate([gate().transpose(0, 2, 1), up().transpose(0, 2, 1)], axis=-1)


def _transposed(read):  # [E, d, d_e] -> [E, d_e, d]
    return lambda: np.ascontiguousarray(read().transpose(0, 2, 1))
