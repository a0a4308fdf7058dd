"""SmolLM3: Llama with NoPE layers. Every `no_rope_layer_interval`-th layer (the 4th, 8th ...; or as
`no_rope_layers` lists, 0 = no RoPE) turns neither Q nor K: its scores see no positions, only the causal mask.
With `use_sliding_window`, the layers `layer_types` calls sliding keep a window (without `layer_types`: the NoPE
layers, as transformers' SmolLM3Config makes them)."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "smollm3"
PREFIXES = ("model.", "")
SPEC = decoder_config.Spec(nope=True, sliding="nope", tie=True, theta=("rope_theta", 2_000_000.0))  # its default base


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
