"""`qkv run --batch`: each sentence of a padded batch, shown without its pads."""

from __future__ import annotations

import sys


def emit(batch, show, heads, precision, fmt, save_npz=None) -> None:
    from qkv_cli.core.stats import head_summary
    from qkv_cli.views.console import console, tables
    from qkv_cli.views.console.describe import settings_line
    from qkv_cli.views.export import results as export
    from qkv_cli.views.export.writing import check_output_path

    if save_npz is not None:
        check_output_path(save_npz)
    if fmt == "json":
        doc = {
            "padded_length": max(batch.lengths),
            "lengths": batch.lengths,
            "sentences": [export.json_doc(r, show, heads) for r in batch.items],
        }
        export.write_json(doc, sys.stdout)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["sentence", *export.CSV_HEADER])
        for b, r in enumerate(batch.items):
            sys.stdout.writelines(export.csv_text(r, show, heads, (b,)))
    else:
        out = console()
        out.print(settings_line(batch.items[0]).split(" ", 1)[1], style="bold")
        out.print(
            f"batch of {len(batch.items)} sentences padded to L={max(batch.lengths)} tokens: pad keys get -inf in the "
            "Mask; each sentence is shown without its pads"
        )
        for b, r in enumerate(batch.items):
            out.print()
            out.print(f"sentence {b}: m={len(r.labels)} (+{max(batch.lengths) - len(r.labels)} pads)", style="bold")
            parts, notes = tables.result_views(r, show, heads, precision, out.width, where=f"[{b}] ")
            for part in parts:
                out.print(part)
            for note in notes:
                out.print(note, style="italic")
            summary = head_summary(r.weights[heads], live_rows=~r.empty_rows)
            for row, j in zip(summary, heads, strict=True):
                row["head"] = j
            out.print(tables.summary_table(summary, title=f"[{b}] per-head summary"))
        if "weights" in show and any(r.masked[: tables.MAX_ROWS].any() for r in batch.items):
            out.print(tables.legend())  # only when some dot is drawn
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(export.batch_arrays(batch), save_npz)}", file=sys.stderr)
