"""`--model`: run a real checkpoint and present its layers as pipeline Results, so every view can read them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli import budget
from qkv_cli.config import Settings
from qkv_cli.errors import QkvError

# options that describe the random-weights model: the checkpoint fixes them
FIXED_BY_CHECKPOINT = {
    "d": "--d", "tau": "--heads", "positions": "--positions", "projection": "--projection", "tokenizer": "--tokenizer",
    "kv_heads": "--kv-heads", "context": "--context", "context_file": "--context-file", "mask_file": "--mask-file",
    "ablate": "--ablate", "causal": "--causal", "window": "--window", "scale": "--scale", "pad_to": "--pad-to",
}  # fmt: skip


def check_options(explicit) -> None:
    clash = [flag for name, flag in FIXED_BY_CHECKPOINT.items() if name in explicit]
    if clash:
        raise QkvError(
            f"{clash[0]} cannot be used with --model: the checkpoint fixes d, the heads, the tokenizer and its mask"
        )


def load(spec: str, dtype: str, download: bool = False):
    from qkv_cli.models import load_model, resolve_model

    return load_model(resolve_model(spec, download=download), dtype=dtype)


@dataclass
class ModelRun:
    """A forward pass and the layers chosen for display, each as a pipeline Result."""

    model: object  # qkv_cli.models.Model
    output: object  # qkv_cli.models.ModelResult
    layers: list[int]  # 0-based, the ones with detail
    results: dict  # layer -> pipeline.Result

    @property
    def config(self):
        return self.model.config


def run(model, text: str, layers: list[int] | None, all_layers: bool, kernel: str, max_memory: int | None) -> ModelRun:
    """Forward `text`; detail for `layers` (default: every layer if all_layers, else the last one)."""
    from qkv_cli.models import estimate_bytes, select_layers

    c = model.config
    if layers:
        chosen = select_layers(layers, c.n_layers)
    else:
        chosen = list(range(c.n_layers)) if all_layers else [c.n_layers - 1]
    tokens = model.tokenize(text)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    needed = estimate_bytes(c, len(tokens), model.dtype, len(chosen))
    budget.check_budget(needed, limit, "fewer --layer, --dtype float32, or a shorter text")
    out = model.forward(np.asarray(tokens.ids, dtype=np.int64), layers=chosen, kernel=kernel, tokens=tokens)
    return ModelRun(model, out, chosen, {l: as_result(model, out, l, kernel) for l in chosen})


def as_result(model, out, layer: int, kernel: str):
    """One layer of a checkpoint as a pipeline Result (with the biases and every layer's weights for export)."""
    from qkv_cli.pipeline import Result

    c = model.config
    det = out.layer(layer)
    settings = Settings(d=c.d, tau=c.n_heads, kernel=kernel, causal=c.family == "gpt2", dtype=str(det.H.dtype))
    result = Result(
        settings=settings, tokens=out.tokens, H=det.H, Wq=det.Wq, Wk=det.Wk, Wv=det.Wv, Q=det.Q, K=det.K, V=det.V,
        scores=det.scores, mask=det.mask, weights=det.weights, heads=det.heads, Wo=det.Wo, output=det.output,
        scale=det.scale,
    )  # fmt: skip
    arrays = out.arrays(layer)
    result.extra["model"] = {"name": c.name or model.name, "family": c.family, "layer": layer, "layers": c.n_layers}
    result.extra["arrays"] = {k: v for k, v in arrays.items() if k not in result.__dict__}
    result.extra.setdefault("json", {})["model"] = result.extra["model"]
    return result


def describe(result) -> str:
    info = result.extra["model"]
    s = result.settings
    mask = "causal" if s.causal else "bidirectional"
    return (
        f"{info['name']} ({info['family']}) layer {info['layer']} of 0..{info['layers'] - 1}: m={len(result.labels)} "
        f"d={s.d} tau={s.tau} d_k={s.d_k} scale={result.scale:.4g} {mask} kernel={s.kernel} {s.dtype}"
    )


def emit_roles(model, text, file, default, kernel, fmt) -> None:
    """`qkv heads --model`: per layer and head roles, over TEXT or every line of --file."""
    from qkv_cli.inputs import get_text
    from qkv_cli.learn import lines_of
    from qkv_cli.learn_views import emit_heads
    from qkv_cli.roles import layer_head_stats

    lines = lines_of(text, file) if file is not None and text is None else [get_text(text, None, default)]
    attentions = [model.run(line, layers=None, kernel=kernel).attentions for line in lines]
    c = model.config
    header = f"{c.name or model.name} ({c.family}) L={c.n_layers} tau={c.n_heads} d={c.d} kernel={kernel}"
    emit_heads(layer_head_stats(attentions), fmt, header, len(lines))


def settings_dict(result) -> dict:
    """The JSON `settings` of a checkpoint layer: what the checkpoint fixed, not the random-weights options."""
    s = result.settings
    return {"d": s.d, "tau": s.tau, "d_k": s.d_k, "kernel": s.kernel, "causal": s.causal, "scale": result.scale,
            "dtype": s.dtype, **result.extra["model"]}  # fmt: skip
