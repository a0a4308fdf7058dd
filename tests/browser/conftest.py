"""Browser tests: Playwright for Python driving Debian's Chromium (/usr/bin/chromium), never a browser that
`playwright install` downloads. Without playwright or Chromium they are skipped, unless QKV_REQUIRE_BROWSER=1 (as
.ci/run sets), which makes that a failure. Every request a page makes is routed: the page file itself is served,
anything else is aborted and counted."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless=new", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip
REQUIRE = os.environ.get("QKV_REQUIRE_BROWSER") == "1"


def missing(why: str):
    if REQUIRE:
        pytest.fail(f"QKV_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why)


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        missing(f"playwright cannot be imported ({exc}): pip install playwright")
    if not Path(CHROMIUM).is_file():
        missing(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


class Viewer:
    """One page of `qkv view` open in Chromium: every other request aborted and counted, errors and dialogs kept."""

    def __init__(self, browser, path, scheme: str = "light", width: int = 1280, height: int = 900, init=None):
        self.url = Path(path).resolve().as_uri()
        self.context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme,
                                           device_scale_factor=1, reduced_motion="reduce")  # fmt: skip
        if init is not None:  # a script run before the page's own (e.g. to take away a newer API)
            self.context.add_init_script(init)
        self.page = self.context.new_page()
        self.blocked, self.requests, self.errors, self.dialogs = [], [], [], []
        self.page.route("**/*", self._route)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: m.type in ("error", "warning") and self.errors.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("dialog", self._dialog)
        self.page.goto(self.url)
        self.page.wait_for_function("window.qkvView && window.qkvView.ready", timeout=20_000)

    def _route(self, route):
        if route.request.url == self.url:
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def js(self, expression, arg=None):
        return self.page.evaluate(expression, arg)

    def weights(self) -> np.ndarray:
        """Every weight the page shows, (L, tau, m, n), through window.qkvView.weight."""
        flat = self.js("""() => { const v = window.qkvView, [L, tau, m, n] = v.shape, out = [];
            for (let l = 0; l < L; l++) for (let h = 0; h < tau; h++) for (let i = 0; i < m; i++)
              for (let j = 0; j < n; j++) out.push(v.weight(l, h, i, j));
            return out; }""")
        return np.array(flat).reshape(self.js("window.qkvView.shape"))

    def shot(self, selector: str = "body") -> bytes:
        return self.page.locator(selector).screenshot(animations="disabled", caret="hide")

    def clean(self):
        """Nothing fetched, nothing aborted, no error or warning in the console, no dialog."""
        others = [u for u in self.requests if u != self.url]
        assert self.blocked == [] and others == [], (self.blocked, others)
        assert self.errors == [] and self.dialogs == [], (self.errors, self.dialogs)


@pytest.fixture
def viewer(browser):
    opened = []

    def open_page(path, **kw) -> Viewer:
        v = Viewer(browser, path, **kw)
        opened.append(v)
        return v

    yield open_page
    for v in opened:
        v.context.close()


@pytest.fixture
def pages(tmp_path):
    """pages(*args): the page of `qkv view ARGS` and the NPZ of `qkv run ARGS --save-npz` (the same run)."""
    from qkv_cli.cli import app

    count = [0]

    def make(*args):
        count[0] += 1
        html, npz = tmp_path / f"page{count[0]}.html", tmp_path / f"run{count[0]}.npz"
        args = [str(a) for a in args]
        for command in (["view", *args, "--out", str(html)], ["run", *args, "--save-npz", str(npz)]):
            result = CliRunner().invoke(app, command)
            assert result.exit_code == 0, (command, result.output)
        with np.load(npz, allow_pickle=False) as z:
            return html, {k: z[k] for k in z.files}

    return make


@pytest.fixture
def page_and_npz(tmp_path):
    """page_and_npz(view_args, command): the page of `qkv view VIEW_ARGS` and the NPZ of `qkv COMMAND --save-npz`
    (e.g. `qkv generate` or `qkv attribute` with the same options: the same run)."""
    from qkv_cli.cli import app

    count = [0]

    def make(view_args, command):
        count[0] += 1
        html, npz = tmp_path / f"kind{count[0]}.html", tmp_path / f"kind{count[0]}.npz"
        for args in (["view", *view_args, "--out", html], [*command, "--save-npz", npz]):
            result = CliRunner().invoke(app, [str(a) for a in args])
            assert result.exit_code == 0, (args, result.output)
        with np.load(npz, allow_pickle=False) as z:
            return html, {k: z[k] for k in z.files}

    return make
