"""A GGUF file's mixture of experts under Hugging Face names: llama.cpp's converter stacks each layer's E experts
into one tensor per matrix (ffn_gate_exps, ffn_up_exps, ffn_down_exps: [E, rows, columns]) and names the router
ffn_gate_inp [E, d]; Hugging Face keeps one tensor per expert (Mixtral: block_sparse_moe.experts.e.w1 / w3 / w2;
Qwen3-MoE and OLMoE: mlp.experts.e.gate_proj / up_proj / down_proj). Expert e is rows e * rows .. (e + 1) * rows
of the stack seen as a matrix, so it is read (and dequantized) alone, when its layer is.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.hf_experts import NAMES
from qkv_cli.models.formats.safetensors import Tensor

NAMING = {
    "mixtral": "mixtral",
    "qwen3_moe": "qwen",
    "olmoe": "qwen",
    "deepseek_v3": "deepseek",
    "deepseek_v2": "deepseek",
}  # model_type -> formats.hf_experts.NAMES
STACKS = {"ffn_gate_exps": 0, "ffn_up_exps": 1, "ffn_down_exps": 2}  # -> the position in NAMES' expert names


def hf_tensors(name: str, t: Tensor, kind: str) -> dict[str, Tensor] | None:
    """The Hugging Face tensors of GGUF tensor `name` if it is a router or an expert stack of a MoE family, else
    None (the caller maps it)."""
    parts = name.split(".")
    if kind not in NAMING or len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit():
        return None
    module, router, experts = NAMES[NAMING[kind]]
    layer, stem, suffix = int(parts[1]), parts[2], parts[3]
    prefix = f"model.layers.{layer}.{module}"
    if stem == "ffn_gate_inp" and suffix == "weight":
        return {f"{prefix}.{router}.weight": t}
    if stem not in STACKS or suffix != "weight":
        return None
    if len(t.shape) != 3 or t.rows is None:
        raise QkvError(f"{t.source}: tensor {name!r} has shape {list(t.shape)}: expected the experts stacked as "
                       "[experts, rows, columns]")  # fmt: skip
    E, rows, cols = t.shape
    out = {}
    for e in range(E):
        ids = np.arange(e * rows, (e + 1) * rows)
        out[f"{prefix}.experts.{e}.{experts[STACKS[stem]]}.weight"] = Tensor(
            (rows, cols), t.kind, _rows_of(t.rows, ids), t.source, _shifted(t.rows, e * rows)
        )
    return out


def _rows_of(rows, ids):  # expert e: its rows of the stack, read when asked
    return lambda: rows(ids)


def _shifted(rows, start: int):  # rows i of expert e are rows start + i of the stack
    return lambda ids: rows(np.asarray(ids, dtype=np.int64) + start)
