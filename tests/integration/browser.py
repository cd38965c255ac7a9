"""A real headless browser for the console tests: Debian's ``chromium`` driven by Selenium
through Debian's ``chromium-driver`` (``chromedriver``), both from apt (.ci/run installs
them), so nothing is downloaded at run time (Selenium Manager is not used: the paths are
given).

:func:`open_browser` starts it, or reports the part missing (``tests.real_parts.missing``:
a failure under ``TIERLOG_REQUIRE_REAL_PARTS=1``). :func:`check_screenshot` decodes a
screenshot with Pillow and checks it is a real page: a PNG of the viewport's size, with more
than a handful of colours.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

from tests import real_parts

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WINDOW = (1280, 1000)


def _import(name: str, part: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        real_parts.missing(part, f"cannot import {name} ({e}); it is in the test extra")


def open_browser() -> Any:
    """A headless Chromium under Selenium (``quit()`` it)."""
    chromium = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    driver = shutil.which("chromedriver") or (CHROMEDRIVER if Path(CHROMEDRIVER).exists() else None)
    if chromium is None or driver is None:
        real_parts.missing(
            "chromium",
            "Debian's chromium and chromium-driver are not installed "
            "(apt-get install chromium chromium-driver)",
        )
    # The paths are given: Selenium Manager must never try to download a browser or driver.
    os.environ.setdefault("SE_OFFLINE", "true")
    webdriver = _import("selenium.webdriver", "selenium")
    service_mod = _import("selenium.webdriver.chrome.service", "selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(arg)
    try:
        browser = webdriver.Chrome(options=options, service=service_mod.Service(driver))
    except Exception as e:  # chromedriver and chromium of different versions, no display libs
        real_parts.missing("chromium", f"chromedriver could not start {chromium}: {e}")
    real_parts.used(
        "chromium",
        f"{chromium} {browser.capabilities.get('browserVersion')} via {driver} (selenium)",
    )
    return browser


def wait_for_page(browser: Any, title: str, timeout: float = 30.0) -> None:
    """Wait until the page whose ``h1`` is ``title`` is loaded (after a click on a link or a
    form's button, the old page or a blank one may still be there)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def loaded(d: Any) -> bool:
        return bool(
            d.execute_script("return document.readyState") == "complete"
            and d.find_element(By.TAG_NAME, "h1").text == title
        )

    WebDriverWait(
        browser,
        timeout,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(loaded, f"the page {title!r}")


def check_screenshot(browser: Any, path: Path) -> Any:
    """Take a screenshot of the viewport into ``path`` and check it is a rendered page: a
    PNG that decodes, the viewport's size, not blank (many colours, no colour covering
    almost everything). The decoded RGB image, for further checks."""
    image_mod = _import("PIL.Image", "Pillow")
    png = browser.get_screenshot_as_png()
    path.write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
    image = image_mod.open(io.BytesIO(png))
    image.load()  # decodes every pixel: a truncated or corrupt PNG raises here
    width, height = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert image.size == (width, height), (image.size, (width, height))
    rgb = image.convert("RGB")
    colors = rgb.getcolors(maxcolors=1 << 16) or []
    assert len(colors) > 20, f"a nearly blank screenshot: {len(colors)} colours"
    top = max(n for n, _ in colors)
    assert top < 0.97 * width * height, "one colour covers almost the whole screenshot"
    return rgb


def has_color(image: Any, rgb: tuple[int, int, int], at_least: int) -> bool:
    """Whether ``image`` has at least ``at_least`` pixels of exactly ``rgb``."""
    colors = image.getcolors(maxcolors=1 << 16) or []
    return any(n >= at_least for n, c in colors if tuple(c) == rgb)
