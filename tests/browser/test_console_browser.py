"""The web console in a real browser (docs/spec/host-features.md#hf-console): headless Chromium from Debian's packages
(``chromium``, ``chromium-driver``; ``.ci/run`` installs them) driven by Selenium against real
``takohost api``, ``worker`` and ``beat`` processes on a private database.

One module, one stack, one browser. The test deploys a workflow through the HTTP API (so the
Operations page lists real Operations, one of them failed), starts instances, and then does
what a person would: signs in with the keyboard, opens every page, watches an instance page
update itself while its steps commit, sends an event (and a bad one, whose API error is shown),
terminates an instance, and reads the cron trigger's runs ledger. Along the way it checks labels,
keyboard focus and text contrast, and takes the README's screenshots (into ``docs/screenshots/``
with ``TAKOHOST_TEST_SCREENSHOTS_DIR=docs/screenshots``; elsewhere a temporary directory).

The ledger's rows (a skipped match and a failed delivery) are inserted into the database
directly: recording real matches takes a cron minute, and the cron machinery is tested in
``tests/e2e/test_cron_processes.py``; the page reads them through the runs service like any other.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import shutil
import tempfile
import textwrap
import time
import urllib.parse
import uuid

import pytest
import requests

from models import cron as cron_models
from models import db as models_db
from models import tenant_logs
from models.base import utcnow
from services import tokens
from tests.support import workflows

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
#: Where the screenshots go: docs/screenshots only when asked (``TAKOHOST_TEST_SCREENSHOTS_DIR``,
#: docs/operations.md "Test-only settings"), so that a test run leaves the checkout as it was.
SHOTS = pathlib.Path(os.environ.get("TAKOHOST_TEST_SCREENSHOTS_DIR") or tempfile.mkdtemp(prefix="takohost-shots-"))

#: Set by ``.ci/run`` (which installs the browser): there a missing browser is a failure, never a
#: skip. Elsewhere (the README's test command on a machine with only Python) the test is skipped.
REQUIRE_BROWSER = os.environ.get("TAKOHOST_TEST_REQUIRE_BROWSER") == "1"
_HAVE_BROWSER = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)
if REQUIRE_BROWSER and not _HAVE_BROWSER:
    raise RuntimeError("TAKOHOST_TEST_REQUIRE_BROWSER=1 but chromium/chromedriver are not installed")

pytestmark = pytest.mark.skipif(
    not _HAVE_BROWSER,
    reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)",
)

SOURCE = '''
import os

class OrderFlow:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        p = event["params"]
        if p.get("explode"):
            raise ValueError("order " + p["orderId"] + " has no items")

        def charge():
            path = p["counter"]
            n = int(open(path).read()) if os.path.exists(path) else 0
            with open(path, "w") as f:
                f.write(str(n + 1))
            print("charging", p["amount"], "attempt", n + 1)
            if n < 1:
                raise RuntimeError("card declined (attempt %d)" % (n + 1))
            return {"charged": p["amount"]}

        charged = step.do("charge card", charge, {"maxAttempts": 3, "initialDelaySeconds": 1})
        step.sleep("cool off", 1)
        shipped = step.wait_for_event("wait for shipping", {"type": "shipped", "timeoutSeconds": 3600})
        return {"charged": charged, "shipped": shipped}


def scheduled(event, env, ctx):
    print("nightly report for", event["scheduledTime"])
'''

CONTRAST_JS = """
function lum(c) {
  var m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
  var p = m[1].split(',').map(function (x) { return parseFloat(x); });
  if (p.length > 3 && p[3] === 0) return null;
  var v = p.slice(0, 3).map(function (x) { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}
function bg(el) {
  for (; el && el.nodeType === 1; el = el.parentElement) {
    var l = lum(getComputedStyle(el).backgroundColor); if (l !== null) return l;
  }
  return 1;
}
var worst = [];
document.querySelectorAll('a, p, td, th, dt, dd, label, button, .badge, .muted, code, h1, h2, summary').forEach(function (el) {
  if (!el.offsetParent || !el.textContent.trim()) return;
  var f = lum(getComputedStyle(el).color), b = bg(el);
  if (f === null) return;
  var r = (Math.max(f, b) + 0.05) / (Math.min(f, b) + 0.05);
  if (r < 4.5) worst.push([el.tagName + '.' + el.className, el.textContent.trim().slice(0, 30), r.toFixed(2)]);
});
return worst;
"""

UNLABELLED_JS = """
var bad = [];
document.querySelectorAll('input:not([type=hidden]), select, textarea').forEach(function (el) {
  var ok = (el.id && document.querySelector('label[for="' + el.id + '"]')) || el.getAttribute('aria-label');
  if (!ok) bad.push(el.outerHTML.slice(0, 80));
});
return bad;
"""


def _wait(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _text(driver, css: str) -> str:
    """The rendered text of the first element matching ``css`` ("" when none), read in one
    script call: the live update may replace the element between a lookup and a read (a
    stale element), which a single ``querySelector`` cannot see."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : '';", css
    )


def _shot(driver, name: str) -> None:
    """A full-page screenshot of the current page into :data:`SHOTS`/NAME.png."""
    import base64

    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    (SHOTS / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))


def _create(api: requests.Session, base: str, space: str, form: str, name: str, spec: dict) -> str:
    """Create a resource through the API and wait for its Operation; returns its uid."""
    body = {"form": workflows.FORM.format(f"{form}/{workflows.FORM_VERSIONS[form]}"), "name": name, "spec": spec}
    response = api.post(f"{base}/v2/spaces/{space}/resources", json=body,
                        headers={"Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 202, response.text
    return workflows._wait_operation(api, base, space, response.json())["resourceUid"]


def _line(fragment: str) -> int:
    """The line of ``main.py`` (as deployed) holding ``fragment``."""
    source = workflows.version_spec(worker="w", source=textwrap.dedent(SOURCE))["modules"]["main.py"]
    return next(n for n, line in enumerate(source.splitlines(), start=1) if fragment in line)


def _accessible(driver) -> None:
    assert driver.execute_script(UNLABELLED_JS) == [], "every field has a label"
    low = driver.execute_script(CONTRAST_JS)
    assert low == [], f"text below 4.5:1 contrast: {low[:5]}"


def _load_ms(driver) -> float:
    return driver.execute_script(
        "var n = performance.getEntriesByType('navigation')[0]; return n.responseEnd - n.requestStart;"
    )


def test_console_in_a_browser(stack, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    base = stack.api_url
    space = "acme-shop"  # a readable Space for the screenshots (the stack's database is fresh)
    with models_db.session_scope(stack.db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {token}"
    worker = _create(api, base, space, "ModuleWorker", "orders", {})
    wf = _create(api, base, space, "DurableWorkflow", "order-fulfilment",
                 {"worker": {"resourceUid": worker}, "className": "OrderFlow"})
    version = _create(api, base, space, "WorkerVersion", "orders-v1",
                      workflows.version_spec(worker=worker, source=textwrap.dedent(SOURCE)))
    _create(api, base, space, "WorkerDeployment", "orders-live",
            {"worker": {"resourceUid": worker}, "versions": [{"version": {"resourceUid": version}, "weight": 100}]})
    instances_url = f"{base}/v2/spaces/{space}/resources/{wf}/instances"
    # A failed Operation for the Operations page: a Version whose module does not import.
    bad = api.post(
        f"{base}/v2/spaces/{space}/resources",
        json={
            "form": "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
            "name": "orders-v2",
            "spec": workflows.version_spec(worker=worker, source="import no_such_module\n"),
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    assert bad.status_code == 202, bad.text
    trigger = api.post(
        f"{base}/v2/spaces/{space}/resources",
        json={
            "form": "https://edge.forms.takoform.com/forms/WorkerCronTrigger/0.3.0/",
            "name": "nightly-report",
            "spec": {"worker": {"resourceUid": worker}, "cron": "0 3 * * *"},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    assert trigger.status_code == 202, trigger.text
    trigger_uid = trigger.json()["resourceUid"]
    for i in range(12):  # some older history for the list and its filters
        assert api.post(instances_url, json={"id": f"Z-{i:04d}", "params": {"orderId": f"Z-{i}", "explode": True}}).ok
    counter = str(tmp_path / "attempts")
    params = {"orderId": "A-1001", "amount": 2500, "counter": counter}
    assert api.post(instances_url, json={"id": "A-1001", "params": params}).status_code == 201

    # Sign in with the keyboard only: the token field has focus, Enter submits.
    browser.get(f"{base}/ui/")
    # autofocus applies once the page has loaded, which a loaded machine may delay a little
    WebDriverWait(browser, 10).until(lambda b: b.switch_to.active_element.get_attribute("id") == "token")
    active = browser.switch_to.active_element
    _accessible(browser)
    active.send_keys("tko_not-a-token", Keys.ENTER)
    assert "not valid" in _text(browser, "[role=alert]")
    browser.switch_to.active_element.send_keys(token, Keys.ENTER)
    _wait(lambda: "/ui/workflows" in browser.current_url, what="workflows page")
    # The first Tab reaches the skip link; it moves focus to the main content.
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to content"

    # The instance page, opened while the instance runs, follows it without a reload.
    page = f"{base}/ui/workflows/{wf}/instance?id=A-1001"
    browser.get(page)
    marker = browser.execute_script("window.__noReload = 1; return window.__noReload;")
    _wait(lambda: "waiting" in _text(browser, "[data-testid=status]"), timeout=45, what="live status waiting")
    assert browser.execute_script("return window.__noReload;") == marker, "the page was not reloaded"
    lanes = {e.get_attribute("data-lane") for e in browser.find_elements(By.CSS_SELECTOR, ".lane[data-lane]")}
    assert {"worker code", "charge card", "cool off", "wait for shipping"} <= lanes
    kinds = {(e.get_attribute("data-kind"), e.get_attribute("data-outcome"))
             for e in browser.find_elements(By.CSS_SELECTOR, "rect.seg")}
    assert ("attempt", "failed") in kinds and ("attempt", "ok") in kinds and ("retry", "ok") in kinds
    assert ("sleep", "ok") in kinds and ("wait", "open") in kinds
    # The chart runs on past now to the wait's deadline (an hour away: cut at the chart's edge),
    # with now marked on every lane.
    assert ("wait", "planned") in kinds
    planned = browser.find_element(By.CSS_SELECTOR, ".lane[data-lane='wait for shipping'] rect.o-planned")
    track = browser.find_element(By.CSS_SELECTOR, ".lane[data-lane='wait for shipping'] svg.track")
    assert abs(planned.rect["x"] + planned.rect["width"] - (track.rect["x"] + track.rect["width"])) <= 2
    assert planned.rect["width"] >= 0.5 * track.rect["width"], (planned.rect, track.rect)
    assert browser.find_elements(By.CSS_SELECTOR, ".lane[data-lane='wait for shipping'] line.now")
    assert "card declined (attempt 1)" in browser.page_source
    assert _text(browser, "[data-testid=where]").startswith(
        "waiting in “wait for shipping” for an event of type “shipped” until"
    )
    assert '"amount": 2500' in _text(browser, "[data-testid=params]")
    assert "StepAttemptFailed" in _text(browser, "[data-testid=history]")
    _wait(lambda: "charging 2500 attempt 2" in _text(browser, "[data-testid=logs]"), what="log lines")
    logs = _text(browser, "[data-testid=logs]")
    assert "[charge card #1] charging 2500 attempt 1" in logs
    assert "host: attempt 1 of step 'charge card' failed: RuntimeError: card declined (attempt 1)" in logs
    traceback = _text(browser, "[data-testid=traceback]")
    assert f'File "main.py", line {_line("raise RuntimeError")}, in charge' in traceback
    assert "RuntimeError: card declined (attempt 1)" in traceback
    _accessible(browser)

    # A bad payload: the API's error, plainly.
    browser.find_element(By.ID, "ev-type").send_keys("shipped")
    browser.find_element(By.ID, "ev-payload").send_keys("[1, 2]")
    browser.find_element(By.CSS_SELECTOR, "form.card button[type=submit]").click()
    error = _wait(lambda: _text(browser, "[data-testid=action-error]"), what="action error")
    assert error.startswith("invalid_params:"), error
    assert browser.find_element(By.ID, "ev-payload").get_attribute("value") == "[1, 2]"  # kept for fixing
    payload = browser.find_element(By.ID, "ev-payload")
    payload.clear()
    payload.send_keys('{"carrier": "DHL", "trackingNumber": "00340434161094042557"}')
    browser.find_element(By.CSS_SELECTOR, "form.card button[type=submit]").click()
    _wait(lambda: _text(browser, "[data-testid=notice]") == "Event sent.", what="event sent notice")
    _wait(lambda: "complete" in _text(browser, "[data-testid=status]"), timeout=30, what="complete (live)")
    _wait(lambda: browser.find_element(By.CSS_SELECTOR, "[data-testid=terminal-note]").is_displayed(),
          what="the actions give way to a note once the instance ended (live)")
    assert not browser.find_element(By.ID, "ev-type").is_displayed()
    assert "00340434161094042557" in _text(browser, "[data-testid=output]")
    assert "EventConsumed" in _text(browser, "[data-testid=history]")
    _shot(browser, "instance")
    browser.find_element(By.LINK_TEXT, "The whole history, page by page").click()
    _wait(lambda: "History of A-1001" in _text(browser, "h1"), what="history page")
    assert "InstanceCompleted" in _text(browser, "[data-testid=history]")
    browser.back()

    # A second instance waits for an event that will never come: send one it does not await
    # (it stays in the inbox), then terminate it from its page.
    params2 = {"orderId": "A-1002", "amount": 990, "counter": str(tmp_path / "attempts2")}
    assert api.post(instances_url, json={"id": "A-1002", "params": params2}).status_code == 201
    browser.get(f"{base}/ui/workflows/{wf}/instance?id=A-1002")
    browser.find_element(By.ID, "ev-type").send_keys("gift-wrap")
    browser.find_element(By.CSS_SELECTOR, "form.card button[type=submit]").click()
    _wait(lambda: "gift-wrap" in _text(browser, "[data-testid=inbox]"), what="event in inbox")
    browser.find_element(By.CSS_SELECTOR, "button.danger").click()
    alert = browser.switch_to.alert
    assert "Terminate instance A-1002" in alert.text
    alert.accept()
    _wait(lambda: _text(browser, "[data-testid=notice]") == "Instance terminated.", timeout=40, what="terminated")
    assert "terminated" in _text(browser, "[data-testid=status]")
    assert "nothing left to terminate" in _text(browser, "[data-testid=terminal-note]")
    assert not browser.find_element(By.CSS_SELECTOR, "button.danger").is_displayed()

    # An errored instance shows its reason and message.
    browser.get(f"{base}/ui/workflows/{wf}/instance?id=Z-0003")
    _wait(lambda: "errored" in _text(browser, "[data-testid=status]"), timeout=30, what="errored")
    assert "run_threw" in _text(browser, "[data-testid=error]")
    assert "Z-3 has no items" in _text(browser, "[data-testid=error]")
    traceback = _text(browser, "[data-testid=traceback]")
    assert f'File "main.py", line {_line("raise ValueError")}, in run' in traceback
    assert 'raise ValueError("order " + p["orderId"] + " has no items")' in traceback

    # Workflows: ready and counts by status.
    browser.get(f"{base}/ui/workflows")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-workflow] [data-count=errored] a"), what="counts")
    row = browser.find_element(By.CSS_SELECTOR, "[data-workflow]")
    assert "ready" in row.text and "not ready" not in row.text
    assert row.find_element(By.CSS_SELECTOR, "[data-count=complete]").text == "1"
    assert row.find_element(By.CSS_SELECTOR, "[data-count=terminated]").text == "1"
    assert row.find_element(By.CSS_SELECTOR, "[data-count=errored]").text == "12"
    _accessible(browser)
    _shot(browser, "workflows")

    # Instances, reached from the keyboard: Tab to the workflow's link, Enter. Newest first;
    # filter by status and by id prefix with the form.
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    for _ in range(12):
        if browser.switch_to.active_element.text == "order-fulfilment":
            break
        browser.switch_to.active_element.send_keys(Keys.TAB)
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    _wait(lambda: "/ui/workflows/order-fulfilment" in browser.current_url, what="instances page from the keyboard")
    ids = [e.get_attribute("data-instance") for e in browser.find_elements(By.CSS_SELECTOR, "[data-instance]")]
    assert ids[:3] == ["A-1002", "A-1001", "Z-0011"], ids
    browser.find_element(By.ID, "f-st-errored").click()
    prefix = browser.find_element(By.ID, "f-prefix")
    prefix.send_keys("Z-000", Keys.ENTER)
    _wait(lambda: "prefix=Z-000" in browser.current_url, what="filtered list")
    ids = [e.get_attribute("data-instance") for e in browser.find_elements(By.CSS_SELECTOR, "[data-instance]")]
    assert ids == [f"Z-{i:04d}" for i in range(9, -1, -1)], ids
    _accessible(browser)
    browser.get(f"{base}/ui/workflows/{wf}")
    _shot(browser, "instances")
    list_ms = _load_ms(browser)

    # Cron trigger: expression, next match, and a ledger with a skip reason and a failed run.
    now = utcnow().replace(hour=3, minute=0, second=0, microsecond=0)  # matches of "0 3 * * *"
    with models_db.session_scope(stack.db_url) as session:
        session.add(cron_models.CronSkip(
            trigger_uid=trigger_uid, cron="0 3 * * *", scheduled_time=now - dt.timedelta(days=2),
            reason="no beat was running: the match could not be recorded within 60 s", recorded_at=utcnow(),
        ))
        match = cron_models.CronMatch(
            trigger_uid=trigger_uid, space=space, worker_uid=worker, cron="0 3 * * *",
            scheduled_time=now - dt.timedelta(days=1), recorded_at=now - dt.timedelta(days=1, seconds=-1),
            state="done",
        )
        session.add(match)
        session.flush()
        delivery = cron_models.CronDelivery(
            match_pk=match.pk, worker_id="w1:42", started_at=now - dt.timedelta(days=1, seconds=-1),
            finished_at=now - dt.timedelta(days=1) + dt.timedelta(seconds=2), outcome="failed",
            error="RuntimeError: the report store was down",
        )
        session.add(delivery)
        session.flush()
        delivery_pk = delivery.pk
    skipped_at = (now - dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    browser.get(f"{base}/ui/triggers")
    assert "0 3 * * *" in browser.find_element(By.CSS_SELECTOR, "[data-trigger=nightly-report]").text
    browser.find_element(By.LINK_TEXT, "nightly-report").click()
    assert _text(browser, "[data-testid=cron]") == "0 3 * * *"
    assert _text(browser, "[data-testid=next-match]").endswith("03:00:00.000 UTC")
    runs = _text(browser, "[data-testid=runs]")
    assert "no beat was running" in runs and "the report store was down" in runs and "failed" in runs
    _accessible(browser)
    _shot(browser, "trigger")
    # Each recorded run links to its logs (docs/spec/host-features.md#hf-observability's per-run logs, where the API serves them).
    with models_db.session_scope(stack.db_url) as session:
        for seq, text in enumerate(("building the report", "the report store was down"), start=1):
            session.add(tenant_logs.TenantLog(delivery_pk=delivery_pk, seq=seq, stream="stdout", message=text,
                                              logged_at=now - dt.timedelta(days=1, seconds=-1)))
    browser.find_element(By.CSS_SELECTOR, "[data-testid=runs] a[href*='/run?t=']").click()
    _wait(lambda: "Run scheduled" in _text(browser, "h1"), what="run page")
    lines = _text(browser, "[data-testid=logs]")
    assert "delivery 1 building the report" in lines and "delivery 1 the report store was down" in lines
    # A skipped match was never recorded: it has no logs.
    browser.get(f"{base}/ui/triggers/{trigger_uid}/run?t=" + urllib.parse.quote(skipped_at))
    assert _text(browser, "[data-testid=no-logs]") == "no logs available"

    # Operations: every create, the failed one with its error.
    browser.get(f"{base}/ui/operations")
    ops = _wait(lambda: "failed" in _text(browser, "[data-testid=operations]")
                and _text(browser, "[data-testid=operations]"), timeout=30, what="failed Operation")
    if "no_such_module" not in ops:
        browser.refresh()
        ops = _text(browser, "[data-testid=operations]")
    assert "orders-v2" in ops and "no_such_module" in ops and "succeeded" in ops
    _accessible(browser)
    _shot(browser, "operations")

    # Another Space's token sees none of it.
    with models_db.session_scope(stack.db_url) as session:
        other = tokens.create_token_txn(session, space=f"s{uuid.uuid4().hex[:12]}")
    browser.delete_all_cookies()
    browser.get(f"{base}/ui/")
    browser.find_element(By.ID, "token").send_keys(other, Keys.ENTER)
    _wait(lambda: "/ui/workflows" in browser.current_url, what="B signed in")
    assert "no DurableWorkflow yet" in browser.page_source
    browser.get(f"{base}/ui/workflows/{wf}/instance?id={urllib.parse.quote('A-1001')}")
    assert _text(browser, "[data-testid=error-code]") == "not_found"
    assert "00340434161094042557" not in browser.page_source
    browser.find_element(By.CSS_SELECTOR, ".who button").click()
    _wait(lambda: browser.find_elements(By.ID, "token"), what="signed out")
    print(json.dumps({"instances_page_ms_in_browser": round(list_ms, 1)}))
