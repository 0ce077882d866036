"""A real headless Chromium (Debian's chromium + chromium-driver, installed by `make setup`) driven by Selenium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.fail("Chromium is not installed: run `make setup` (apt-get install chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


def screenshot(drv, path: Path) -> Path:
    drv.save_screenshot(str(path))
    assert path.stat().st_size > 1000, f"empty screenshot {path}"
    return path
