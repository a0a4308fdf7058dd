"""A gpt-oss GGUF file's own tensors under Hugging Face names (the rest is gguf_map's).

llama.cpp's converter (GptOssModel.modify_tensors) renames the sinks (attn_sinks.weight) and the router (ffn_gate_inp),
transposes the experts to (out, in) and splits transformers' gate_up_proj, whose columns interleave gate and up
(g_0, u_0, g_1, u_1 ...), into ffn_gate_exps and ffn_up_exps (each with its bias); real files hold the experts in
MXFP4. Here they are put back as transformers keeps them: gate_up_proj [E, d, 2 d_e] (columns interleaved again),
down_proj [E, d_e, d], each read (and dequantized) when the forward pass first needs its layer.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.safetensors import Tensor

PLAIN = {"attn_sinks.weight": "self_attn.sinks", "ffn_gate_inp.weight": "mlp.router.weight",
         "ffn_gate_inp.bias": "mlp.router.bias"}  # fmt: skip


def gpt_oss_tensors(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Hugging Face name -> Tensor for every layer's sinks, router and experts."""
    out = {}
    layers = sorted({int(n.split(".")[1]) for n in tensors if n.startswith("blk.") and n.split(".")[1].isdigit()})
    for l in layers:
        p, hf = f"blk.{l}.", f"model.layers.{l}."
        for name, target in PLAIN.items():
            if p + name in tensors:
                out[hf + target] = tensors[p + name]
        gate, up, down = (tensors.get(f"{p}ffn_{x}_exps.weight") for x in ("gate", "up", "down"))
        if gate is None and up is None and down is None:
            continue
        if gate is None or up is None or down is None:
            raise QkvError(f"GGUF layer {l} has some of ffn_gate_exps, ffn_up_exps and ffn_down_exps, not all three")
        if len(gate.shape) != 3 or gate.shape != up.shape or len(down.shape) != 3:
            raise QkvError(f"GGUF layer {l}: ffn_gate_exps {list(gate.shape)} and ffn_up_exps {list(up.shape)} must "
                           f"both be [E, d_e, d], ffn_down_exps {list(down.shape)} [E, d, d_e]")  # fmt: skip
        E, de, d = gate.shape
        out[hf + "mlp.experts.gate_up_proj"] = Tensor((E, d, 2 * de), gate.kind, _interleaved(gate, up, True),
                                                      gate.source)  # fmt: skip
        out[hf + "mlp.experts.down_proj"] = Tensor(down.shape[:1] + down.shape[:0:-1], down.kind, _transposed(down),
                                                   down.source)  # fmt: skip
        biases = [tensors.get(f"{p}ffn_{x}_exps.bias") for x in ("gate", "up", "down")]
        if biases[0] is not None and biases[1] is not None:
            b = biases[0]
            out[hf + "mlp.experts.gate_up_proj_bias"] = Tensor(b.shape[:-1] + (2 * b.shape[-1],), b.kind,
                                                               _interleaved(*biases[:2], False), b.source)  # fmt: skip
        if biases[2] is not None:
            out[hf + "mlp.experts.down_proj_bias"] = biases[2]
    return out


def _interleaved(gate: Tensor, up: Tensor, weights: bool):
    """() -> [E, d, 2 d_e] (weights: the file's [E, d_e, d] transposed) or [E, 2 d_e] (biases), columns g, u, g, u."""

    def read():
        g, u = gate.read(), up.read()
        if g.shape != u.shape:
            raise QkvError(f"GGUF expert gate {list(g.shape)} and up {list(u.shape)} differ in shape")
        if weights:
            g, u = g.transpose(0, 2, 1), u.transpose(0, 2, 1)
        out = np.empty((*g.shape[:-1], 2 * g.shape[-1]), dtype=np.result_type(g, u))
        out[..., ::2], out[..., 1::2] = g, u
        return out

    return read


def _transposed(t: Tensor):
    return lambda: np.ascontiguousarray(t.read().transpose(0, 2, 1))
