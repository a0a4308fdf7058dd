"""--format json and csv of a checkpoint run, written as the forward produces each layer: a layer's matrices are
written, then dropped, so the output never holds more than one layer beside what a table's run holds.

The text is the same, byte for byte, as views.model.emit_run writes from a finished run (the same json_doc,
write_json and csv_text): the first layer opens the document (its settings, the tokens, "layers": {), each layer
adds its matrices, and finish(run) closes it with what only the end of the pass knows (ids, attentions ...)."""

from __future__ import annotations

import json
import sys

from qkv_cli.views.export import results as export


class LayerWriter:
    """on_layer(l, result) for models.model.Model.forward: each detailed layer written to `out` as it is produced."""

    def __init__(self, fmt: str, show, heads, out=None):
        self.fmt, self.show, self.heads = fmt, [s for s in show if s != "experts"], list(heads)
        self.out = sys.stdout if out is None else out
        self.started = False
        self.layers: list[int] = []  # the layers written, in order
        self._writer = None

    def __call__(self, l: int, result) -> None:
        if self.fmt == "json":
            self._json_layer(l, result)
        else:
            self._csv_layer(l, result)
        self.started = True
        self.layers.append(l)

    def _json_layer(self, l: int, result) -> None:
        doc = export.json_doc(result, self.show, self.heads)
        matrices = doc.pop("matrices")
        if not self.started:  # the document's head: what the first chosen layer tells, then the layers' object
            self.out.write("{")
            write_items(doc, self.out)
            self.out.write(", " if doc else "")
            self.out.write('"layers": {')
        else:
            self.out.write(", ")
        self.out.write(json.dumps(str(l)) + ": ")
        export.write_json(matrices, self.out)

    def _csv_layer(self, l: int, result) -> None:
        import csv

        if self._writer is None:
            self._writer = csv.writer(self.out, lineterminator="\n")
            self._writer.writerow(["layer", *export.CSV_HEADER])
        self.out.writelines(export.csv_text(result, self.show, self.heads, (l,)))

    def finish(self, run, experts: bool = False) -> None:
        """What the end of the pass knows: JSON's ids, attentions, layer kinds ... (the NPZ's names) and the
        predictions; CSV's routing rows (--show experts)."""
        if self.fmt == "json":
            from qkv_cli.views.model import predictions_doc

            self.out.write("}")
            tail = export.checkpoint_extras(run)
            if run.predictions is not None:
                tail.update(predictions_doc(run))
            if tail:
                self.out.write(", ")
            write_items(tail, self.out)
            self.out.write("}\n")
        elif experts and run.router_top is not None:
            from qkv_cli.views.console.experts import csv_rows

            self._writer.writerows(csv_rows(run, self.layers))


def write_items(doc: dict, out) -> None:
    """A dict's items as write_json writes them inside its braces: "key": value, joined by ", "."""
    for i, (key, value) in enumerate(doc.items()):
        out.write(", " if i else "")
        out.write(json.dumps(str(key)) + ": ")
        export.write_json(value, out)
