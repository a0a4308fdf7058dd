"""`qkv shapes --model` on an encoder-decoder: the matrices of its three attentions, each with its own m and n.

encoder self-attention   n x n    H = the encoder layer's input (n source tokens)
decoder self-attention   m x m    H = the decoder layer's input (m target tokens), causal
cross-attention          m x n    Q = X W^q (decoder, m), K = Y W^k and V = Y W^v (encoder output, n)
"""

from __future__ import annotations

from dataclasses import replace

from qkv_cli.core.shapes import matrices


def encdec_matrices(c, m: int, n: int) -> list:
    """Every matrix of one layer of each attention, named encoder.*, decoder.*, cross.*; m target, n source tokens."""
    scale = None if c.encdec.scaled else 1.0  # T5 does not divide by sqrt(d_k)
    tau_dec = c.encdec.dec_heads
    dk_dec = c.encdec.dec_d_k or c.d // tau_dec
    parts = (
        ("encoder", matrices(c.d, c.n_heads, n, None, None, d_k=c.d_k, scale=scale,
                             input_meaning=f"encoder layer input: n={n} source tokens")),
        ("decoder", matrices(c.d, tau_dec, m, None, None, d_k=dk_dec, scale=scale,
                             input_meaning=f"decoder layer input: m={m} target tokens (causal)")),
        ("cross", matrices(c.d, tau_dec, m, n, None, d_k=dk_dec, scale=scale,
                           input_meaning=f"X: the decoder stream, m={m}; K, V from Y: the encoder output, n={n}")),
    )  # fmt: skip
    return [replace(x, name=f"{side}.{x.name}", meaning=f"{side}: {x.meaning}") for side, mats in parts for x in mats]
