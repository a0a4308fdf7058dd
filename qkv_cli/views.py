"""What each command shows: tables, JSON, CSV, NPZ and heatmaps of a pipeline Result."""

from __future__ import annotations

import sys

from rich.console import Console

from qkv_cli.export import check_output_path


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich would exit 1; let the CLI stop quietly with 0
        raise BrokenPipeError


def console() -> Console:
    return _Console(highlight=False, soft_wrap=False)


def check_npz_path(path: str | None) -> None:
    if path is not None:
        check_output_path(path)


def check_image_path(path: str, panels: int = 1) -> None:
    from qkv_cli.plot import FORMATS, check_panels

    check_output_path(path, FORMATS)
    check_panels(panels)


def default_text() -> str:
    from qkv_cli.samples import default_text as sample

    return sample()


def settings_line(result) -> str:
    if "model" in result.extra:  # a layer of a real checkpoint
        from qkv_cli.checkpoint import describe

        return describe(result)
    s = result.settings
    mask = f"window n_c={s.window}" if s.window else ("causal" if s.causal else "no mask")
    return (
        f"m={len(result.labels)} d={s.d} tau={s.tau} d_k={s.d_k} scale={result.scale:.4g} ({s.scale}) {mask} "
        f"positions={s.positions} projection={s.projection} kernel={s.kernel} {s.dtype} seed={s.seed}"
    ) + learning_suffix(result)


def learning_suffix(result) -> str:
    """Cross-attention, grouped-query heads, custom masks and ablation, when used."""
    from qkv_cli.learn_views import settings_suffix

    return settings_suffix(result)


def emit(result, show, heads, precision, fmt, save_npz=None) -> None:
    """Print the result in the chosen format; then save the NPZ if asked."""
    from qkv_cli import export, render
    from qkv_cli.summary import head_summary

    if not hasattr(result, "weights"):  # a long-document window run kept only the band
        from qkv_cli import band_views

        return band_views.emit(result, show, heads, precision, fmt, save_npz)
    if fmt == "json":
        sys.stdout.write(export.to_json(result, show, heads) + "\n")
    elif fmt == "csv":
        sys.stdout.write(export.to_csv(result, show, heads))
    else:
        out = console()
        out.print(settings_line(result), style="bold")
        where = f"layer {result.extra['model']['layer']}: " if "model" in result.extra else ""
        parts, notes = render.result_views(result, show, heads, precision, out.width, where)
        for part in parts:
            out.print(part)
        for note in notes:
            out.print(note, style="italic")
        if "weights" in show:
            out.print(render.legend())
        if "ablation" in result.extra:
            from qkv_cli.ablate import describe

            out.print(describe(result.extra["ablation"]), style="yellow")
        if result.empty_rows.any():
            rows = ", ".join(str(i) for i in result.empty_rows.nonzero()[0][:10])
            out.print(f"queries with every key masked (weights all 0): {rows}", style="yellow")
        cross = "H_context" in result.extra.get("arrays", {})  # cross-attention: no distance, no self share
        summary = head_summary(result.weights[heads], live_rows=~result.empty_rows, cross=cross)
        for row, j in zip(summary, heads, strict=True):
            row["head"] = j
        out.print(render.summary_table(summary))
    if save_npz is not None:
        path = export.save_npz(result, save_npz)
        print(f"saved {path}", file=sys.stderr)


def save_heatmap(result, heads, path) -> str:
    from qkv_cli.plot import draw_grid, save_figure

    if not hasattr(result, "weights"):
        from qkv_cli import band_views

        return band_views.save_heatmap(result, heads, path)
    panels = [(f"head {j}", result.weights[j], result.masked) for j in heads]
    fig = draw_grid(panels, result.labels, result.key_labels, settings_line(result))
    save_figure(fig, path)
    return str(path)
