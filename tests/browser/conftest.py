"""Fixtures of the browser tests: one real stack (API, worker, beat on a private database) per
module, and one headless Chromium for the whole session (each module signs in to a Space of its
own). The stack is per module, not per session: its database is the one the environment names
while it is open (``workflows.isolated_database``), so a session-long stack would leave every later
module of this xdist process reading and writing the browser's database instead of its own
(tests/conftest.py refuses that loudly)."""

from __future__ import annotations

import pytest

from tests.browser.test_console_browser import CHROMEDRIVER, CHROMIUM
from tests.support import workflows


@pytest.fixture(scope="module")
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


