"""An offline page opened in the browser tests' Chromium, with what it logged and what it asked the network for."""

from __future__ import annotations


def open_page(browser, path, width: int = 1300, height: int = 900):
    """-> (page, errors, requests): the page at `path`; console errors and warnings and page errors as they come;
    every URL it requests (an offline page asks for none beyond its own file)."""
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    errors, requests = [], []
    page.on("console", lambda m: m.type in ("error", "warning") and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda q: requests.append(q.url))
    page.goto(path.resolve().as_uri())
    return page, errors, requests
