"""UMT5 (Chung et al. 2023): T5 v1.1 whose every self-attention layer has its own relative position bias table,
rather than one shared by the layers (models.t5 reads them per layer for this model_type)."""

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

MODEL_TYPE = "umt5"
