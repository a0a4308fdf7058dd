"""One-line descriptions of a Result: the settings line above every table and figure, and the ablation line."""

from __future__ import annotations

from qkv_cli.core.result import Kind, Result
from qkv_cli.views.console import clean


def settings_line(result: Result) -> str:
    if result.kind == Kind.BAND:
        s = result.settings
        m, n_c = result.band.shape[1:]
        return (
            f"m={m} d={s.d} tau={s.tau} d_k={s.d_k} scale={result.scale:.4g} ({s.scale}) window n_c={n_c}, "
            f"band only: weights kept as (tau, m, n_c), never m x m; {s.dtype} seed={s.seed}"
        )
    if result.model is not None:  # a layer of a real checkpoint
        info = result.model
        mask = ("causal" if info.causal else "bidirectional") + (f" window n_c={info.window}" if info.window else "")
        chunk = getattr(result.rules, "chunk", None)  # Llama 4's chunked layers
        mask += f" chunk n_ch={chunk}" if chunk else ""
        if result.is_cross:  # an encoder-decoder's cross-attention: nothing masked, n source tokens
            mask = f"cross-attention n={len(result.key_labels)} (Q from the decoder's X, K and V from the encoder's Y)"

        kv = f" G={result.G}" if result.G != result.tau else ""
        kind = f" ({info.layer_type})" if info.layer_type else ""
        kind += " no RoPE (NoPE layer)" if info.rope is False else ""
        m = len(result.labels) if result.rows is None or result.is_cross else len(result.key_labels)
        rows = "" if result.rows is None else f" queries {_span(result.rows)} ({len(result.rows)} of {m}, --rows)"
        return (
            f"{clean(info.name)} ({info.family}) layer {info.layer} of 0..{info.n_layers - 1}{kind}: "
            f"m={m}{rows} d={result.d} tau={result.tau}{kv} d_k={result.d_k} scale={result.scale:.4g} "
            f"{mask} kernel={result.kernel} {result.dtype}"
        )
    s = result.settings
    mask = f"window n_c={s.window}" if s.window else ("causal" if s.causal_mask else "no mask")
    mask += f" chunk n_ch={s.chunk}" if s.chunk else ""
    return (
        f"m={len(result.labels)} d={s.d} tau={s.tau} d_k={s.d_k} scale={result.scale:.4g} ({s.scale}) {mask} "
        f"positions={s.positions} projection={s.projection} kernel={s.kernel} {s.dtype} seed={s.seed}"
    ) + suffix(result)


def figure_title(result: Result, heads) -> str:
    """A short title that says what a figure shows: whose weights, which layer and heads, which mask."""
    shown = f"head {heads[0]}" if len(heads) == 1 else f"{len(heads)} heads"
    if result.model is not None:
        info = result.model
        kind = f" ({info.layer_type.replace('_attention', '')})" if info.layer_type else ""
        kind += " no RoPE" if info.rope is False else ""
        return f"{clean(info.name)}, layer {info.layer}{kind}: {shown}"
    s = result.settings
    if result.kind == Kind.BAND:
        return f"Sliding window n_c={result.band.shape[-1]}: {shown} (band only)"
    mask = "cross-attention" if result.is_cross else (
        f"window n_c={s.window}" if s.window else ("causal" if s.causal_mask else "no mask"))  # fmt: skip
    mask += f", chunk n_ch={s.chunk}" if s.chunk and not result.is_cross else ""
    return f"Attention weights: {shown}, {mask}"


def suffix(result: Result) -> str:
    """Cross-attention, grouped-query heads, custom masks and ablation, when used."""
    s = result.settings
    parts = []
    if s.G != s.tau:
        parts.append(f"kv_heads G={s.G}")
    if result.is_cross:
        parts.append(f"cross-attention n={len(result.key_labels)} (keys/values from --context)")
    if result.rules is not None and result.rules.custom is not None:
        parts.append("mask-file")
    if s.ablate:
        parts.append(f"ablate={s.ablate.upper()} ({s.ablate_with})")
    return "".join(f" {p}" for p in parts)


def ablation_line(rep: dict) -> str:
    """One line: 'ablated V (zeros): max |change| vs the intact run: Q 0, K 0, ...'."""
    parts = ", ".join(f"{k} {v:.3g}" for k, v in rep["max_change"].items())
    unchanged = [k for k, v in rep["max_change"].items() if v == 0]
    tail = f"; unchanged: {', '.join(unchanged)}" if unchanged else ""
    return f"ablated {rep['target']} ({rep['with']}): max |change| vs the intact run: {parts}{tail}"


def _span(rows) -> str:  # the kept query positions, consecutive: "8..10"
    return f"{int(rows[0])}..{int(rows[-1])}"


FORMULAS = {
    "rollout": "rollout (Abnar & Zuidema 2020) through layers 0..{layer}: A_l = 0.5 {fusion}_h(alpha_l) + 0.5 I, "
    "rows renormalised, R = A_{layer} ... A_0",
    "value-norm": "value-norm (Kobayashi et al. 2020), layer {layer}: ||sum_h alpha^h_ij f^h(x_j)|| with "
    "f^h(x) = (x W^h_v + b^h_v) W^h_o",
    "value-zeroing": "value-zeroing (Mohebbi et al. 2023), layer {layer}: 1 - cos(y_i, y_i with v_j = 0 in every "
    "head), rows normalised to sum to 1",
}


def attributed_layer(r: Result) -> int:  # the layer an ATTRIBUTION Result attributes
    return 0 if r.model is None else r.model.layer


def attribution_formula(r: Result) -> str:  # what an ATTRIBUTION Result holds, as its formula
    return FORMULAS[r.method].format(layer=attributed_layer(r), fusion=r.head_fusion or "mean")
