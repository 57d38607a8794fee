"""Fixtures of the browser tests: one real stack (API, worker, beat on a private database) and one
headless Chromium for the whole session, shared by every module here (each signs in to a Space of
its own)."""

from __future__ import annotations

import pytest

from tests.browser.test_console_browser import CHROMEDRIVER, CHROMIUM
from tests.support import workflows


@pytest.fixture(scope="session")
def stack():
    with workflows.private_stack(workers=1, beat=True) as s:
        yield s


@pytest.fixture(scope="session")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


