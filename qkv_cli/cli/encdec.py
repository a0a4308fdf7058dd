"""The options of an encoder-decoder checkpoint (T5, BART, Marian): the decoder's text and which attention."""

from __future__ import annotations

from typing import Annotated

import typer

from qkv_cli.cli.options import choices

Attention = choices("Attention", ("encoder", "decoder", "cross"))  # models.encdec_model.SIDES (a test checks)
TargetOpt = Annotated[
    str | None,
    typer.Option("--target", metavar="TEXT", help="With an encoder-decoder --model: the decoder reads its start "
                 "token, then TEXT (teacher-forced); TEXT is the source the encoder reads."),
]  # fmt: skip
AttentionOpt = Annotated[
    Attention | None,
    typer.Option("--attention", help="With an encoder-decoder --model: encoder (n x n), decoder (m x m, causal) or "
                 "cross (m x n: Q from the decoder's X, K and V from the encoder's Y; the default)."),
]  # fmt: skip
ENCDEC = [("target", TargetOpt, None), ("attention", AttentionOpt, None)]
PatchTargetOpt = Annotated[
    str | None,
    typer.Option("--target", metavar="TEXT", help="With an encoder-decoder --model: the decoder's text, the same in "
                 "both runs (teacher-forced after its start token); --answer is the target's next token. CLEAN and "
                 "CORRUPTED are the two sources."),
]  # fmt: skip
PatchSideOpt = Annotated[
    Attention | None,
    typer.Option("--attention", help="With an encoder-decoder --model, what is patched: encoder (its layers x source "
                 "positions, its self-attention's heads), decoder (its layers x target positions, its "
                 "self-attention's heads) or cross (the default: the decoder's layers, the cross-attention's heads: q "
                 "the decoder's queries, k and v the keys and values read from the source)."),
]  # fmt: skip
