"""mT5 (Xue et al. 2021): T5 v1.1 on a multilingual vocabulary; the same layers and config keys as models.t5."""

from __future__ import annotations

from qkv_cli.models.families.encdec.t5 import (  # noqa: F401  (the family's parts, re-exported)
    ATTENTION_INPUT,
    BASE,
    HEAD,
    PREFIXES,
    parameter_table,
    prepare,
    read_config,
    tensor_shapes,
)

MODEL_TYPE = "mt5"
