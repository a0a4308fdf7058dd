"""OLMo 2: QK-norm over the whole q and k projections (before splitting heads), and norms after attention and after
the MLP instead of before them."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "olmo2"
PREFIXES = ("model.", "")
ATTENTION_INPUT = "the layer input itself (OLMo 2 has no norm before attention: it norms q, k and the output)"


SPEC = decoder_config.Spec(layout="olmo2", qk_norm="flat")


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
