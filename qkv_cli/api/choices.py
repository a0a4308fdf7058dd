"""What each option accepts, from the registries that define it: the CLI declares its options from these, so a new
kernel, dtype or attribution method is offered by the CLI and accepted by the API without an edit in either."""

from __future__ import annotations

from qkv_cli.core.kernels import KERNELS
from qkv_cli.core.settings import ABLATE, ABLATE_WITH, DTYPES, MAX_WIDTH, POSITIONS, PROJECTIONS
from qkv_cli.pipeline.patch.names import DIRECTIONS, METRICS, WHAT
from qkv_cli.pipeline.request import FUSIONS, METHODS
from qkv_cli.text.tokens import TOKENIZER_NAMES as TOKENIZERS  # or a path to a tokenizer.json

__all__ = ["ABLATE", "ABLATE_WITH", "DIRECTIONS", "DTYPES", "FUSIONS", "KERNELS", "MAX_WIDTH", "METHODS", "METRICS",
           "POSITIONS", "PROJECTIONS", "TOKENIZERS", "WHAT"]  # fmt: skip
