"""A real headless Chromium (Debian's package), driven by Playwright, for the report tests.

Without Chromium the browser tests skip locally, and fail when ``CI`` is set: CI installs
Chromium (``.ci/run``), so a missing one there is a broken CI, not a reason to skip."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = os.environ.get("RAGJURY_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> None:
    missing = []
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401 - only whether it is installed
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if missing:
        message = "the browser tests need " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message + "; CI installs them in .ci/run", pytrace=False)
        pytest.skip(message)


@dataclass
class Opened:
    """A page and what it reported: console errors and uncaught exceptions, requests made."""

    page: Page
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def open_page(browser: Browser, path: Path, *, width: int = 1280, height: int = 860) -> Opened:
    """``path`` in a new page, once its script has built the table (``body[data-ready]``)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    opened = Opened(page)
    page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: opened.errors.append(f"uncaught: {exc}"))
    page.on("request", lambda r: opened.requests.append(r.url))
    page.goto(path.resolve().as_uri())
    return opened


@contextmanager
def chromium() -> Iterator[Browser]:
    """The headless browser (a test module's fixture opens it once for its tests)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield launched
        finally:
            launched.close()
