"""Marian (Junczys-Dowmunt et al. 2018; the opus-mt translation models): BART's post-norm layers with fixed
sinusoidal positions and embeddings scaled by sqrt(d).

    x_0 = E[ids] * sqrt(d) + PE[0..m-1]     PE: sines in the first d/2 columns, cosines in the second (no offset)
    then as models.families.encdec.bart: post-norm layers, Q K^T / sqrt(d_k), logits = X E^T + final_logits_bias
"""

from __future__ import annotations

from qkv_cli.models.families.encdec import bart
from qkv_cli.models.families.encdec.bart import BASE, PREFIXES, tensor_shapes  # noqa: F401  (the family's parts, re-exported)
from qkv_cli.models.layers.encdec import sinusoids

MODEL_TYPE = "marian"
ATTENTION_INPUT = "the layer input"


def read_config(keys) -> dict:
    return bart.read_config(keys, learned_positions=False, scale_default=True)


def parameter_table(c):
    return bart.parameter_table(c)


def prepare(w, c, dtype):
    return bart.prepare(w, c, dtype, positions=sinusoids(c.max_positions, c.d).astype(dtype))
