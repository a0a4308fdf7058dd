"""`qkv shapes`: the shape table of a pipeline.shapes.Shapes, rendered with rich (no numpy here)."""

from __future__ import annotations

import json

from qkv_cli.core.gqa import kv_head_of
from qkv_cli.core.shapes import ITEMSIZE, as_json, scale_words, scores_formula


def number(n: float, unit: str = "") -> str:
    """1234567 -> '1.23M' (bytes: '1.23 MB'); 0 -> '-'."""
    if not n:
        return "-"
    for suffix in ("", "K", "M", "G", "T", "P"):
        if abs(n) < 1000 or suffix == "P":
            text = f"{n:.0f}" if suffix == "" else f"{n:.3g}"
            return f"{text}{' ' if unit else ''}{suffix}{unit}"
        n /= 1000
    return str(n)


def emit(sh, fmt: str) -> None:
    """The table (or JSON) of a pipeline.shapes.Shapes; for a checkpoint, its parameters first."""
    if sh.model is not None:
        return emit_model(sh, fmt)
    emit_sizes(sh, fmt)


def doc(sh) -> dict:
    """What `qkv shapes --format json` prints for a pipeline.shapes.Shapes (the Python API's qkv.shapes returns it)."""
    return model_doc(sh) if sh.model is not None else sizes_doc(sh)


def sizes_doc(sh) -> dict:
    dk = sh.model.d_k if getattr(sh.model, "latent", None) else sh.mats[1].cols  # MLA: mats[1] is W^DQ
    out = as_json(sh.d, sh.tau, sh.m, sh.mats, sh.n, sh.dtype)
    if sh.kv_heads is not None:
        out.update(gqa_doc(sh.d, sh.tau, sh.kv_heads, dk))
    return out


def emit_sizes(sh, fmt: str) -> None:
    d, tau, m, n, dtype, kv_heads, mats = sh.d, sh.tau, sh.m, sh.n, sh.dtype, sh.kv_heads, sh.mats
    dk = sh.model.d_k if getattr(sh.model, "latent", None) else mats[1].cols
    if fmt == "json":
        print(json.dumps(sizes_doc(sh)))
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.views.console import console as terminal

    n = m if n is None else n
    width = f"d_k=d/tau={dk}" if dk * tau == d else f"d_k={dk}"
    title = f"m={m} n={n} d={d} tau={tau} {width} {dtype}; per-head matrices show one head, x = how many"
    table = Table(title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1), pad_edge=False)
    console = terminal()  # the shared stdout console: every column when redirected, no escape bytes
    columns = ["matrix", "notation", "shape", "x", "params", "FLOPs", "bytes"]
    wide = console.width >= 110
    rows = []
    for x in mats:
        size = x.rows * x.cols * x.count * ITEMSIZE[dtype]
        rows.append([x.name, x.notation, x.shape, f"x{x.count}", number(x.params), number(x.flops), number(size, "B")])
        rows[-1] += [x.meaning] if wide else []
    total = sum(x.rows * x.cols * x.count * ITEMSIZE[dtype] for x in mats)
    rows.append(
        [
            "total",
            "",
            "",
            "",
            number(sum(x.params for x in mats)),
            number(sum(x.flops for x in mats)),
            number(total, "B"),
        ]
        + ([""] if wide else [])
    )
    names = columns + (["meaning"] if wide else [])
    widths = [max(len(col), *(len(r[k]) for r in rows)) for k, col in enumerate(names)]
    room = console.width - sum(widths) - 3 * len(names) - 2 + widths[1] + (widths[-1] if wide else 0)
    for k, col in enumerate(names):
        squeeze = col in ("notation", "meaning")
        table.add_column(
            col,
            justify="right" if col in columns[3:] else "left",
            no_wrap=col != "meaning",  # a long meaning wraps in its column rather than being cut
            min_width=None if squeeze else widths[k],
            max_width=max(8, room) if squeeze else None,
        )
    for r in rows:
        table.add_row(*(Text(c) for c in r))
    console.print(table)
    if kv_heads is not None:
        layers = None if sh.model is None else sh.model.n_layers
        for line in gqa_lines(d, tau, kv_heads, ITEMSIZE[dtype], dk, layers):
            console.print(Text(line))


def model_dims(c) -> dict:
    """A checkpoint's dimensions, and what its family changes (kv heads, NoPE layers, experts, chunks, MLA ...)."""
    dims = {"family": c.family, "layers": c.n_layers, "d": c.d, "tau": c.n_heads, "d_k": c.d_k,
            "d_ff": c.d_ff, "vocab_size": c.vocab_size, "max_positions": c.max_positions}  # fmt: skip
    if c.n_kv_heads != c.n_heads:
        dims["kv_heads"] = c.n_kv_heads
    if c.rope is not None and c.rope.no_rope:  # SmolLM3: the layers without RoPE
        dims["nope_layers"] = list(c.rope.no_rope)
    moe = c.mlp.moe if c.mlp is not None else None
    if moe is not None:  # a mixture of experts: E experts, k chosen per token, each d_expert wide
        dims |= {"experts": moe.experts, "top_k": moe.top_k, "d_expert": moe.d_expert}
        if moe.dense_layers:
            dims["dense_mlp_layers"] = list(moe.dense_layers)
    if c.attention is not None and c.attention.chunk_size:  # Llama 4: the chunked layers and their n_ch
        dims["chunked_layers"] = [l for l, t in enumerate(c.attention.layer_types) if t == "chunked_attention"]
        dims["chunk_size"] = c.attention.chunk_size
    r = c.rope.ropes[""] if c.rope is not None else None
    latent = getattr(c, "latent", None)
    if latent is not None:  # multi-head latent attention: its ranks and widths
        dims |= {"q_lora_rank": latent.q_rank, "kv_lora_rank": latent.kv_rank, "d_nope": latent.d_nope,
                 "d_rope": latent.d_rope, "d_v": latent.d_v}  # fmt: skip
    if r is not None and r.rot < c.d_k:  # partial rotary (GPT-NeoX, Phi-4-mini): the first rot dimensions turn
        dims["rotary_dims"] = r.rot
    if r is not None and r.kind == "longrope":  # Phi-3: short factors up to this length, long ones beyond
        dims["longrope_switch"] = r.original_max_positions
    if c.attention is not None and c.attention.sinks:  # gpt-oss: a learned sink logit per head
        dims["sinks"] = True
    return dims


def model_doc(sh) -> dict:
    """`shapes --model --format json`: the dimensions, one layer's matrices, the parameters and the KV cache."""
    c, params, m, dtype = sh.model, sh.params, sh.m, sh.dtype
    scale, softcap = (c.attention.scale, c.attention.softcap) if c.attention else (None, None)
    L, G, dk = cache_sizes(c)
    doc = as_json(c.d, c.n_heads, m, sh.mats, None, dtype) | model_dims(c) | {"kv_heads": c.n_kv_heads}
    if scale is not None:  # a RoPE decoder's scale (Gemma: query_pre_attn_scalar^-1/2) and soft-cap c or None
        doc |= {"scale": scale, "softcap": softcap}
    doc["parameters"] = {p.name: {"shape": list(p.shape), "count": p.count, "params": p.params} for p in params}
    doc["total_parameters"] = sum(p.params for p in params)
    doc["file_parameters"] = sh.file_params
    doc["kv_cache_bytes_per_token"] = kv_cache_bytes(L, G, dk, ITEMSIZE[dtype])
    if c.latent is not None:
        from qkv_cli.pipeline.mla_shapes import cache_numbers

        doc["kv_cache_numbers_per_token_layer"] = cache_numbers(c)
        doc["kv_cache_bytes_per_token"] = c.n_layers * c.latent.cached * ITEMSIZE[dtype]
    doc["kv_cache_bytes"] = m * doc["kv_cache_bytes_per_token"]
    return doc


def emit_model(sh, fmt: str) -> None:
    """`shapes --model`: the checkpoint's real dimensions and parameters per matrix, then one layer's shapes."""
    if fmt == "json":
        print(json.dumps(model_doc(sh)))
        return
    c, params, m, dtype = sh.model, sh.params, sh.m, sh.dtype
    total = sum(p.params for p in params)
    dims, latent = model_dims(c), getattr(c, "latent", None)
    scale, softcap = (c.attention.scale, c.attention.softcap) if c.attention else (None, None)  # None: 1/sqrt(d_k)
    L, G, dk = cache_sizes(c)
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.views.console import clean
    from qkv_cli.views.console import console as terminal

    console = terminal()  # the shared stdout console: every column when redirected, no escape bytes
    console.print(Text(f"{clean(c.name)}: " + " ".join(f"{k}={v}" for k, v in dims.items())), style="bold")
    console.print(Text("Learned parameters (per-head matrices: one head's shape, x = how many in the model)"))
    table = Table(box=box.SIMPLE_HEAD)  # its title above as a line: a narrow table would wrap it
    for col in ("matrix", "notation", "shape", "x", "params"):
        table.add_column(col, justify="right" if col in ("x", "params") else "left", no_wrap=True)
    for p in params:
        table.add_row(*(Text(v) for v in (p.name, p.notation, " x ".join(map(str, p.shape)), f"x{p.count}",
                                          f"{p.params:,}")))  # fmt: skip
    table.add_row(Text("total"), Text(""), Text(""), Text(""), Text(f"{total:,}"))
    console.print(table)
    unused = f"; {sh.file_params - total:,} more are stored but unused here" if sh.file_params > total else ""
    console.print(Text(f"counted from the file: {sh.file_params:,} parameters{unused}"))
    if latent is not None:
        from qkv_cli.pipeline.mla_shapes import cache_lines

        for line in cache_lines(c, ITEMSIZE[dtype], m):
            console.print(Text(line))
    else:
        per_token = kv_cache_bytes(L, G, dk, ITEMSIZE[dtype])
        sizes = f"L={L} x G={G} x d_k={dk} x {ITEMSIZE[dtype]} bytes"
        whose = " (the decoder's; the encoder's keys and values are computed once)" if c.encdec is not None else ""
        console.print(Text(f"KV cache{whose}: 2 (K, V) x {sizes} = {per_token:,} bytes per token over all layers; "
                           f"{m * per_token:,} bytes for m={m} tokens"))  # fmt: skip
    if scale_words(c.d_k, scale, softcap):  # not plain Q K^T / sqrt(d_k): say what the scores are
        console.print(Text(f"scores: S = {scores_formula(c.d_k, scale, softcap)}, before the mask; "
                           f"{scale_words(c.d_k, scale, softcap, root=True)}"))  # fmt: skip
    emit_sizes(sh, "table")


def cache_sizes(c) -> tuple[int, int, int]:
    """(L, G, d_k) of the KV cache: an encoder-decoder's is its decoder's (the encoder's keys are computed once)."""
    if c.encdec is None:
        return c.n_layers, c.n_kv_heads, c.d_k
    tau = c.encdec.dec_heads
    return c.encdec.dec_layers, tau, c.encdec.dec_d_k or c.d // tau


def kv_cache_bytes(layers: int, G: int, dk: int, itemsize: int) -> int:
    """Bytes a KV cache holds per token: K and V, G heads of d_k, every layer."""
    return 2 * layers * G * dk * itemsize


def gqa_lines(d: int, tau: int, G: int, itemsize: int, dk: int, layers: int | None = None) -> list[str]:
    """The query head -> key/value head mapping and what sharing saves (in the cache: per layer, and for all
    `layers` of a checkpoint)."""
    r = tau // G
    groups = [f"{g * r}..{g * r + r - 1} -> {g}" if r > 1 else f"{g} -> {g}" for g in range(G)]
    if len(groups) > 8:
        groups = groups[:4] + ["..."] + groups[-2:]
    full = 4 * d * tau * dk
    saved = 2 * (tau - G) * d * dk
    cache, cache_full = 2 * G * dk * itemsize, 2 * tau * dk * itemsize
    return [
        f"grouped-query attention: tau={tau} query heads share G={G} key/value heads; query head j uses key/value "
        f"head j // (tau/G) = j // {r}",
        "query heads -> kv head: " + ", ".join(groups),
        f"W_k, W_v: {G} x ({d} x {dk}) each instead of {tau}: {saved:,} fewer parameters "
        f"({full - saved:,} instead of {full:,} for W_q, W_k, W_v, W^o; {100 * saved / full:.1f}% saved)",
        f"K, V cache per token and layer: {cache:,} bytes instead of {cache_full:,} ({tau // G}x smaller)"
        + ("" if layers is None else f"; x L={layers} layers: {layers * cache:,} instead of {layers * cache_full:,}"),
    ]


def gqa_doc(d: int, tau: int, G: int, dk: int) -> dict:
    return {
        "kv_heads": G,
        "kv_head_of_query_head": [kv_head_of(j, tau, G) for j in range(tau)],
        "params_saved": 2 * (tau - G) * d * dk,
    }
