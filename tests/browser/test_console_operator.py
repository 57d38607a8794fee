"""The console as an operator uses it every day, in real Chromium against the real stack (docs/spec/host-features.md#hf-console,
console findings): JSON shown as text (no ``\\u003c`` escape codes), going to an instance by id from
anywhere, URLs by workflow name, back to the page asked for after signing in, copy-link, starting
an instance with params, terminating with a reason recorded with its actor, and what a terminated
instance says.

Has a stack of its own and shares the session's browser (``conftest.py``); signs in
to a Space of its own.
"""

from __future__ import annotations

import textwrap
import urllib.parse

import pytest
import requests

from models import db as models_db
from services import tokens
from tests.browser.test_console_browser import CONTRAST_JS, _create, _text, _wait
from tests.support import workflows

SOURCE = '''
import random
import time

class Ops:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        p = event.get("params") or {}
        if p.get("crash"):
            step.do("parse", lambda: int("x'<y>"), {"maxAttempts": 1})
        if p.get("random"):  # not deterministic: a new name on every replay
            step.do("r-%d" % random.randrange(10**9), lambda: {"n": 1})
            step.sleep("nap", 1)
        if p.get("chatty"):
            print("before the talk")

            def talk():
                for i in range(p["chatty"]):
                    print("line", i)
                return {"n": p["chatty"]}

            step.do("talk", talk)
        if p.get("ticks"):
            def tick():
                for i in range(p["ticks"]):
                    print("tick", i, flush=True)
                    time.sleep(0.5)
                return {}

            step.do("ticking", tick)
        if p.get("slow"):
            step.do("slow step", lambda: time.sleep(p["slow"]))
        if p.get("flaky"):
            def reserve():
                raise RuntimeError("no stock for <b>%s</b>" % p["flaky"])

            step.do("reserve", reserve, {"maxAttempts": 3, "initialDelaySeconds": 1})
        return step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})


def scheduled(event, env, ctx):
    print("tick", event["scheduledTime"])
'''

SPACE = "ops-desk"


@pytest.fixture(scope="module")
def ops(stack):
    """The Space ``ops-desk`` with workflows ``ops-flow`` and ``ops-other`` (same code)."""
    base = stack.api_url
    with models_db.session_scope(stack.db_url) as session:
        token = tokens.create_token_txn(session, space=SPACE)
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {token}"
    worker = _create(api, base, SPACE, "ModuleWorker", "ops", {})
    flows = {
        name: _create(api, base, SPACE, "DurableWorkflow", name, {"worker": {"resourceUid": worker}, "className": "Ops"})
        for name in ("ops-flow", "ops-other")
    }
    version = _create(api, base, SPACE, "WorkerVersion", "ops-v1",
                      workflows.version_spec(worker=worker, source=textwrap.dedent(SOURCE)))
    _create(api, base, SPACE, "WorkerDeployment", "ops-live",
            {"worker": {"resourceUid": worker}, "versions": [{"version": {"resourceUid": version}, "weight": 100}]})

    trigger = api.post(f"{base}/v2/spaces/{SPACE}/resources", headers={"Idempotency-Key": "ops-nightly"}, json={
        "form": workflows.FORM.format("WorkerCronTrigger/0.3.0"), "name": "ops-nightly",
        "spec": {"worker": {"resourceUid": worker}, "cron": "30 2 * * *"}})
    assert trigger.status_code == 202, trigger.text
    workflows._wait_operation(api, base, SPACE, trigger.json())

    class Ops:
        url = base
        trigger_uid = trigger.json()["resourceUid"]
        worker_uid = worker
        session = api
        key = token
        uids = flows

        def instances(self, name: str) -> str:
            return f"{base}/v2/spaces/{SPACE}/resources/{flows[name]}/instances"

        def start(self, name: str, instance_id: str, params: dict | None = None) -> None:
            answer = api.post(self.instances(name), json={"id": instance_id, "params": params or {}})
            assert answer.status_code == 201, answer.text

        def status(self, name: str, instance_id: str) -> str:
            quoted = urllib.parse.quote(instance_id, safe="")
            return api.get(f"{self.instances(name)}/{quoted}").json()["status"]

        def status_or_none(self, name: str, instance_id: str) -> str | None:
            quoted = urllib.parse.quote(instance_id, safe="")
            answer = api.get(f"{self.instances(name)}/{quoted}")
            return answer.json()["status"] if answer.status_code == 200 else None

        def wait(self, name: str, instance_id: str, wanted: str, timeout: float = 45) -> None:
            _wait(lambda: self.status(name, instance_id) == wanted, timeout=timeout, what=f"{instance_id} {wanted}")

    return Ops()


def _sign_in(browser, ops) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.delete_all_cookies()
    browser.get(f"{ops.url}/ui/")
    browser.find_element(By.ID, "token").send_keys(ops.key, Keys.ENTER)
    _wait(lambda: "/ui/workflows" in browser.current_url, what="signed in")


def test_json_is_shown_as_text_not_escape_codes(stack, browser, ops):
    ops.start("ops-flow", "json-1", {"crash": True})
    ops.start("ops-flow", "json-2")
    ops.wait("ops-flow", "json-1", "errored")
    ops.wait("ops-flow", "json-2", "waiting")
    note = {"text": "it's <b>bold</b> & “quoted”"}
    sent = ops.session.post(f"{ops.instances('ops-flow')}/json-2/events", json={"type": "note", "payload": note})
    assert sent.status_code in (200, 202), sent.text
    _sign_in(browser, ops)

    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=json-1")
    history = _text(browser, "[data-testid=history]")
    assert "\"function\": \"<lambda>\"" in history, history[-2000:]
    assert "x'<y>" in history
    assert "\\u003c" not in browser.page_source and "\\u0027" not in browser.page_source
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance/history?id=json-1")
    assert "\"function\": \"<lambda>\"" in _text(browser, "[data-testid=history]")

    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=json-2")
    inbox = _text(browser, "[data-testid=inbox]")
    assert '"it\'s <b>bold</b> & “quoted”"' in inbox, inbox
    assert browser.execute_script("return document.querySelectorAll('[data-testid=inbox] b').length") == 0


def test_go_to_an_instance_from_anywhere_and_links_by_name(stack, browser, ops):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ops.start("ops-flow", "twin")
    ops.start("ops-other", "twin")
    ops.start("ops-other", "only-here")
    browser.delete_all_cookies()
    # A link opened while signed out comes back to its page after the sign-in.
    wanted = f"{ops.url}/ui/workflows/ops-other/instance?id=only-here"
    browser.get(wanted)
    browser.find_element(By.ID, "token").send_keys(ops.key, Keys.ENTER)
    _wait(lambda: browser.current_url == wanted, what="back on the page asked for")
    assert _text(browser, "h1") == "only-here"
    # Not to another site, whatever ?next= says.
    browser.delete_all_cookies()
    browser.get(f"{ops.url}/ui/?next=//example.com/ui/x")
    browser.find_element(By.ID, "token").send_keys(ops.key, Keys.ENTER)
    _wait(lambda: browser.current_url == f"{ops.url}/ui/workflows", what="an outside next is ignored")

    # URLs by workflow name; the workflows page links by name.
    link = browser.find_element(By.CSS_SELECTOR, "[data-workflow=ops-flow] th a").get_attribute("href")
    assert link == f"{ops.url}/ui/workflows/ops-flow"
    browser.get(link)
    assert _text(browser, "h1").startswith("ops-flow")

    # "/" from anywhere focuses "go to instance"; an id in one workflow opens its page.
    browser.find_element(By.TAG_NAME, "body").send_keys("/")
    assert browser.switch_to.active_element.get_attribute("id") == "goto"
    browser.switch_to.active_element.send_keys("only-here", Keys.ENTER)
    _wait(lambda: browser.current_url == wanted, what="the instance's page")
    # An id in two workflows: choose; an unknown id: a 404 that says so.
    browser.find_element(By.TAG_NAME, "body").send_keys("/")
    browser.switch_to.active_element.send_keys("twin", Keys.ENTER)
    _wait(lambda: _text(browser, "[data-testid=go-found]"), what="the choice")
    choices = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "[data-testid=go-found] a")]
    assert choices == [f"{ops.url}/ui/workflows/ops-flow/instance?id=twin",
                       f"{ops.url}/ui/workflows/ops-other/instance?id=twin"]
    answer = requests.get(f"{ops.url}/ui/go?id=nobody", cookies={c["name"]: c["value"] for c in browser.get_cookies()},
                          allow_redirects=False, timeout=10)
    assert answer.status_code == 404 and 'data-testid="go-none"' in answer.text

    # Copy link: the page's address by name, on the clipboard.
    browser.get(f"{ops.url}/ui/workflows/{ops.uids['ops-other']}/instance?id=only-here")  # a UID still works
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": ops.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    browser.find_element(By.CSS_SELECTOR, "[data-testid=copy-link]").click()
    _wait(lambda: _text(browser, "[data-testid=copy-status]") == "Link copied.", what="copied")
    copied = browser.execute_async_script(
        "var done = arguments[0]; navigator.clipboard.readText().then(done, function (e) { done('error: ' + e); });")
    assert copied == wanted, copied



def test_start_with_params_and_terminate_with_a_reason(stack, browser, ops):
    from selenium.webdriver.common.by import By

    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/workflows/ops-flow")
    browser.find_element(By.CSS_SELECTOR, "details.start > summary").click()
    browser.find_element(By.ID, "start-id").send_keys("started-1")
    browser.find_element(By.ID, "start-params").send_keys("[1]")
    browser.find_element(By.CSS_SELECTOR, "details.start button[type=submit]").click()
    error = _wait(lambda: _text(browser, "[data-testid=start-error]"), what="start refused")
    assert error.startswith("invalid_params:"), error
    assert browser.find_element(By.ID, "start-params").get_attribute("value") == "[1]"  # kept for fixing
    params = browser.find_element(By.ID, "start-params")
    params.clear()
    params.send_keys('{"note": "from the console"}')
    browser.find_element(By.CSS_SELECTOR, "details.start button[type=submit]").click()
    _wait(lambda: _text(browser, "[data-testid=notice]") == "Instance started.", what="started")
    assert browser.current_url == f"{ops.url}/ui/workflows/ops-flow/instance?id=started-1&done=start"
    assert '"note": "from the console"' in _text(browser, "[data-testid=params]")
    _wait(lambda: "waiting" in _text(browser, "[data-testid=status]"), timeout=45, what="waiting (live)")

    browser.find_element(By.ID, "term-reason").send_keys("customer cancelled the order")
    browser.find_element(By.CSS_SELECTOR, "button.danger").click()
    browser.switch_to.alert.accept()
    _wait(lambda: _text(browser, "[data-testid=notice]") == "Instance terminated.", timeout=40, what="terminated")
    ended = _text(browser, "[data-testid=terminated]")
    assert "by console (Space ops-desk)" in ended and "“customer cancelled the order”" in ended, ended
    assert "not finished yet" not in browser.page_source
    history = _text(browser, "[data-testid=history]")
    assert ('InstanceTerminated\t{"reason": "customer cancelled the order", "by": "console (Space ops-desk)"}'
            in history), history[-600:]
    # Through the API: the actor is recorded too.
    ops.start("ops-flow", "api-ended")
    ops.wait("ops-flow", "api-ended", "waiting")
    assert ops.session.post(f"{ops.instances('ops-flow')}/api-ended/terminate").status_code == 200
    events = ops.session.get(f"{ops.instances('ops-flow')}/api-ended/history").json()["events"]
    assert events[-1]["attributes"] == {"by": f"API (Space {SPACE})"}


def test_a_step_in_flight_relative_times_and_visible_failures(stack, browser, ops):
    import re

    from selenium.webdriver.common.by import By

    ops.start("ops-flow", "slow-1", {"slow": 60})
    progress = f"{ops.instances('ops-flow')}/slow-1/progress"
    _wait(lambda: ops.session.get(progress).json().get("since"), timeout=45, what="the step runs")
    _sign_in(browser, ops)
    try:
        browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=slow-1")
        where = _text(browser, "[data-testid=where]")
        assert where.startswith("running “slow step” (attempt 1), for "), where
        row = _text(browser, "[data-testid=in-flight]")
        assert row.startswith("slow step") and "running attempt 1 for" in row, row
        assert "attempt 1 of “slow step” running since" in _text(browser, "[data-testid=history-in-flight]")
        bars = browser.find_elements(By.CSS_SELECTOR, ".lane[data-lane='slow step'] rect.seg")
        assert [(b.get_attribute("data-kind"), b.get_attribute("data-outcome")) for b in bars] == [("attempt", "open")]
        first = _text(browser, "[data-testid=where] .elapsed")
        _wait(lambda: _text(browser, "[data-testid=where] .elapsed") != first, timeout=5, what="elapsed time ticks")

        # Relative times, the UTC instant on hover.
        created = browser.find_element(By.CSS_SELECTOR, "[data-testid=created] time")
        assert re.fullmatch(r"just now|\d+ s ago", created.text), created.text
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", created.get_attribute("title"))
        browser.get(f"{ops.url}/ui/workflows/ops-flow")
        listed = browser.find_element(By.CSS_SELECTOR, "[data-instance=slow-1] time")
        assert listed.text.endswith("ago") or listed.text == "just now"
        assert listed.get_attribute("title").endswith(" UTC")
    finally:
        assert ops.session.post(f"{ops.instances('ops-flow')}/slow-1/terminate").status_code == 200

    # A failed sub-second attempt is drawn wide enough to see and point at.
    ops.start("ops-flow", "quick-fail", {"crash": True})
    ops.wait("ops-flow", "quick-fail", "errored")
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=quick-fail")
    failed = browser.find_element(By.CSS_SELECTOR, "rect.seg[data-kind=attempt][data-outcome=failed]")
    track = browser.find_element(By.CSS_SELECTOR, ".lane[data-lane=parse] svg.track")
    assert failed.rect["width"] >= 0.014 * track.rect["width"] and failed.rect["width"] >= 8, failed.rect


def test_attempt_errors_are_listed_without_a_hover_or_click(stack, browser, ops):
    # Before, a failed attempt's error showed only in a timeline bar's tooltip (hover or focus) and
    # in a closed "Timeline as a table"; only the newest traceback was on the page.
    import re

    from selenium.webdriver.common.by import By

    ops.start("ops-flow", "flaky-1", {"flaky": "TEA-01"})
    ops.wait("ops-flow", "flaky-1", "errored", timeout=60)
    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=flaky-1")
    panel = browser.find_element(By.CSS_SELECTOR, "[data-testid=attempt-errors]")
    assert panel.is_displayed()
    items = panel.find_elements(By.CSS_SELECTOR, "li[data-attempt]")
    assert [(li.get_attribute("data-step"), li.get_attribute("data-attempt")) for li in items] == [
        ("reserve", "1"), ("reserve", "2"), ("reserve", "3")]
    for n, li in enumerate(items, start=1):
        text = li.text  # WebDriver's text is what is rendered visible: nothing hidden counts
        assert li.is_displayed() and text.startswith(f"“reserve” attempt {n}"), text
        assert "RuntimeError: no stock for <b>TEA-01</b>" in text, text  # escaped text, not markup
        stamp = li.find_element(By.CSS_SELECTOR, "time")
        assert stamp.is_displayed() and re.fullmatch(r"just now|\d+ s ago", stamp.text), stamp.text
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", stamp.get_attribute("title"))
        error = li.find_element(By.CSS_SELECTOR, "[data-testid=attempt-error]")
        assert browser.execute_script("return arguments[0].closest('details') === null;", error)
    assert "next attempt" in items[0].text and "failed for good" in items[2].text, (items[0].text, items[2].text)
    assert browser.execute_script("return document.querySelectorAll('[data-testid=attempt-errors] b').length") == 0
    # Each attempt's traceback is one click away, not only the newest.
    assert len(panel.find_elements(By.CSS_SELECTOR, "details pre.traceback")) == 3


def test_a_replay_divergence_is_flagged(stack, browser, ops):
    ops.start("ops-flow", "dice", {"random": True})
    ops.wait("ops-flow", "dice", "waiting")
    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=dice")
    flagged = _text(browser, "[data-testid=diverged]")
    assert flagged.startswith("replay diverged at step 'r-"), flagged
    assert "replay skipped" in flagged and "not deterministic" in flagged
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=json-2")
    assert _text(browser, "[data-testid=diverged]") == ""


def test_cron_next_matches_last_outcome_lateness_and_unknown_runs(stack, browser, ops):
    import datetime as dt

    from selenium.webdriver.common.by import By

    from models import cron as cron_models
    from models.base import utcnow

    day = utcnow().replace(hour=2, minute=30, second=0, microsecond=0) - dt.timedelta(days=1)
    with models_db.session_scope(stack.db_url) as session:
        session.add(cron_models.CronSkip(trigger_uid=ops.trigger_uid, cron="30 2 * * *",
                                         scheduled_time=day - dt.timedelta(days=1), reason="no beat was running",
                                         recorded_at=day))
        match = cron_models.CronMatch(trigger_uid=ops.trigger_uid, space=SPACE, worker_uid=ops.worker_uid,
                                      cron="30 2 * * *", scheduled_time=day,
                                      recorded_at=day + dt.timedelta(seconds=1), state="done")
        session.add(match)
        session.flush()
        session.add(cron_models.CronDelivery(match_pk=match.pk, worker_id="w1:1",
                                             started_at=day + dt.timedelta(seconds=298),
                                             finished_at=day + dt.timedelta(seconds=300), outcome="ok"))
    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/triggers")
    row = browser.find_element(By.CSS_SELECTOR, "[data-trigger=ops-nightly]")
    assert row.find_element(By.CSS_SELECTOR, "[data-testid=last-run]").text.startswith("ok ")
    assert "up to date" in row.text and "idle" not in row.text
    row.find_element(By.LINK_TEXT, "ops-nightly").click()
    browser.find_element(By.CSS_SELECTOR, "details > summary").click()
    upcoming = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "[data-testid=upcoming] li")]
    assert len(upcoming) == 10 and all("02:30:00.000 UTC" in text for text in upcoming), upcoming
    assert upcoming[0].startswith(_text(browser, "[data-testid=next-match]"))
    late = _text(browser, "[data-testid=late]")
    assert late == "started 4 min 58 s late: no free worker slot: every slot was busy running contexts or handlers"
    # A run time the ledger does not have is a 404, not an empty page.
    browser.get(f"{ops.url}/ui/triggers/{ops.trigger_uid}/run?t=2001-01-01T00:00:00Z")
    assert _text(browser, "[data-testid=error-code]") == "not_found"
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    answer = requests.get(f"{ops.url}/ui/triggers/{ops.trigger_uid}/run?t=2001-01-01T00:00:00Z", cookies=cookies,
                          timeout=10)
    assert answer.status_code == 404
    skipped_at = (day - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert requests.get(f"{ops.url}/ui/triggers/{ops.trigger_uid}/run?t={skipped_at}", cookies=cookies,
                        timeout=10).status_code == 200


def test_empty_states_say_what_starts_the_thing(stack, browser, ops):
    # A Space of its own, with nothing in it yet: each empty page names what fills it.
    space = "ops-empty"
    with models_db.session_scope(stack.db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {token}"
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.delete_all_cookies()
    browser.get(f"{ops.url}/ui/")
    browser.find_element(By.ID, "token").send_keys(token, Keys.ENTER)
    _wait(lambda: "/ui/workflows" in browser.current_url, what="signed in")
    assert "no DurableWorkflow yet. Deploy one: takohost deploy examples/orders" in _text(browser, "main")
    browser.get(f"{ops.url}/ui/triggers")
    assert _text(browser, "[data-testid=empty]") == (
        "This Space has no cron trigger yet. Add a [[triggers]] entry (a name and a cron expression) to takohost.toml"
        " and a scheduled(event, env, ctx) handler to the worker, then takohost deploy.")
    browser.get(f"{ops.url}/ui/operations")
    assert _text(browser, "[data-testid=empty]") == (
        "No Operation in this Space yet: each create, update and delete of a resource makes one"
        " (takohost deploy DIR makes several).")

    worker = _create(api, ops.url, space, "ModuleWorker", "idle", {})
    flow = _create(api, ops.url, space, "DurableWorkflow", "idle-flow", {"worker": {"resourceUid": worker}, "className": "Ops"})
    version = _create(api, ops.url, space, "WorkerVersion", "idle-v1",
                      workflows.version_spec(worker=worker, source=textwrap.dedent(SOURCE)))
    _create(api, ops.url, space, "WorkerDeployment", "idle-live",
            {"worker": {"resourceUid": worker}, "versions": [{"version": {"resourceUid": version}, "weight": 100}]})
    made = api.post(f"{ops.url}/v2/spaces/{space}/resources", headers={"Idempotency-Key": "idle-yearly"}, json={
        "form": workflows.FORM.format("WorkerCronTrigger/0.3.0"), "name": "idle-yearly",
        "spec": {"worker": {"resourceUid": worker}, "cron": "0 0 1 1 *"}})
    assert made.status_code == 202, made.text
    workflows._wait_operation(api, ops.url, space, made.json())
    browser.get(f"{ops.url}/ui/workflows/idle-flow")
    assert _text(browser, "[data-testid=empty]") == (
        "No instance of idle-flow yet. Start one above, with takohost instances create idle-flow --params '{…}',"
        f" or POST /v2/spaces/{space}/resources/{flow}/instances.")
    browser.get(f"{ops.url}/ui/triggers/{made.json()['resourceUid']}")
    runs = _text(browser, "[data-testid=empty]")
    assert runs.startswith("No match recorded or skipped yet: the first comes at the next match, ") and \
        runs.endswith("-01-01 00:00:00.000 UTC, while a takohost beat runs."), runs
    browser.get(f"{ops.url}/ui/operations")
    assert _text(browser, "[data-testid=empty]") == ""  # the creates above are listed now


def _pages(ops) -> list[str]:
    base = ops.url
    return [
        f"{base}/ui/workflows", f"{base}/ui/workflows/ops-flow", f"{base}/ui/workflows/ops-flow/instance?id=json-1",
        f"{base}/ui/workflows/ops-flow/instance?id=json-2", f"{base}/ui/workflows/ops-flow/instance/history?id=json-1",
        f"{base}/ui/triggers", f"{base}/ui/triggers/{ops.trigger_uid}", f"{base}/ui/operations",
        f"{base}/ui/go?id=twin",
    ]


def test_a_phone_width_never_scrolls_sideways(stack, browser, ops):
    for instance_id, params in (("json-1", {"crash": True}), ("json-2", {})):  # when run alone
        if ops.status_or_none("ops-flow", instance_id) is None:
            ops.start("ops-flow", instance_id, params)
    _sign_in(browser, ops)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    try:
        wide = {}
        for url in [f"{ops.url}/ui/"] + _pages(ops):
            browser.get(url)
            width = browser.execute_script("return document.documentElement.scrollWidth")
            if width > 390:
                wide[url] = (width, browser.execute_script(
                    "return Array.from(document.querySelectorAll('body *')).filter(function (e) {"
                    " return e.getBoundingClientRect().right > 391; }).slice(0, 6).map(function (e) {"
                    " return e.tagName + '.' + e.className + '#' + (e.id || ''); });"))
        assert wide == {}, wide
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_dark_mode_follows_the_system(stack, browser, ops):
    _sign_in(browser, ops)
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        for url in _pages(ops):
            browser.get(url)
            background = browser.execute_script("return getComputedStyle(document.documentElement).backgroundColor")
            assert background == "rgb(13, 17, 23)", (url, background)
            low = browser.execute_script(CONTRAST_JS)
            assert low == [], (url, low[:5])
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    browser.get(f"{ops.url}/ui/workflows")
    assert browser.execute_script("return getComputedStyle(document.documentElement).backgroundColor") == \
        "rgb(255, 255, 255)"


def test_logs_show_the_newest_lines_follow_live_filter_and_page_back(stack, browser, ops):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    ops.start("ops-flow", "chatty", {"chatty": 700})
    ops.wait("ops-flow", "chatty", "waiting")
    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=chatty")
    lines = _text(browser, "[data-testid=logs]").splitlines()
    assert len(lines) == 300 and lines[-1].endswith("[talk #1] line 699") and lines[0].endswith("line 400"), lines[:2]
    at_bottom = browser.execute_script(
        "var p = document.querySelector('[data-testid=logs]'); return p.scrollTop + p.clientHeight >= p.scrollHeight - 2;")
    assert at_bottom, "the panel shows its newest line"
    browser.find_element(By.CSS_SELECTOR, "[data-testid=all-logs]").click()
    lines = _text(browser, "[data-testid=logs]").splitlines()
    assert len(lines) == 500 and lines[-1].endswith("line 699") and lines[0].endswith("line 200")
    browser.find_element(By.CSS_SELECTOR, "[data-testid=older]").click()
    older = _text(browser, "[data-testid=logs]").splitlines()
    assert older[0].endswith("before the talk") and older[-1].endswith("line 199"), (older[:2], older[-1:])
    # Filters: step, attempt, stream.
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance/logs?id=chatty")
    Select(browser.find_element(By.ID, "l-step")).select_by_value("talk")
    browser.find_element(By.ID, "l-attempt").send_keys("1")
    Select(browser.find_element(By.ID, "l-stream")).select_by_value("stdout")
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    _wait(lambda: "step=talk" in browser.current_url, what="filtered")
    lines = _text(browser, "[data-testid=logs]").splitlines()
    assert len(lines) == 500 and all("[talk #1]" in line for line in lines)
    browser.find_element(By.CSS_SELECTOR, "[data-testid=older]").click()
    assert len(_text(browser, "[data-testid=logs]").splitlines()) == 200  # the talk's first lines, no other
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance/logs?id=chatty&stream=stderr")
    assert _text(browser, "[data-testid=no-logs]") == "No line matches."

    # Follow live: lines printed while the page is open appear without a reload.
    ops.start("ops-flow", "ticker", {"ticks": 8})
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=ticker")
    marker = browser.execute_script("window.__stay = 1; return 1;")
    _wait(lambda: "tick 7" in _text(browser, "[data-testid=logs]"), timeout=45, what="lines followed live")
    assert browser.execute_script("return window.__stay;") == marker


def test_a_live_redraw_keeps_the_readers_focus_and_scroll(stack, browser, ops):
    # Before, every live redraw replaced the live part wholesale: the focused timeline bar lost
    # focus and the logs panel jumped back to its newest line while the reader was reading above.
    from selenium.webdriver.common.by import By

    ops.start("ops-flow", "reader", {"chatty": 200, "ticks": 40})
    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/workflows/ops-flow/instance?id=reader")
    _wait(lambda: "tick 1" in _text(browser, "[data-testid=logs]"), timeout=45, what="the ticks print")
    browser.execute_script("document.querySelector('[data-testid=logs]').scrollTop = 40;")
    bar = browser.find_element(By.CSS_SELECTOR, ".lane[data-lane=talk] rect.seg")
    browser.execute_script("arguments[0].focus();", bar)
    version = browser.execute_script("return document.getElementById('live').getAttribute('data-version');")
    for _ in range(2):  # two redraws, each with new lines
        _wait(lambda v=version: browser.execute_script(
            "return document.getElementById('live').getAttribute('data-version');") != v,
            timeout=20, what="a live redraw")
        version = browser.execute_script("return document.getElementById('live').getAttribute('data-version');")
    assert browser.execute_script("return document.querySelector('[data-testid=logs]').scrollTop;") == 40
    focused = browser.execute_script(
        "var a = document.activeElement; var l = a.closest('[data-lane]');"
        " return [a.tagName.toLowerCase(), a.getAttribute('data-kind'), l && l.getAttribute('data-lane')];")
    assert focused == ["rect", "attempt", "talk"], focused
    # Scrolled back to the bottom, the panel follows the newest line again.
    browser.execute_script("var p = document.querySelector('[data-testid=logs]'); p.scrollTop = p.scrollHeight;")
    _wait(lambda: "tick 12" in _text(browser, "[data-testid=logs]"), timeout=30, what="more ticks")
    at_bottom = browser.execute_script(
        "var p = document.querySelector('[data-testid=logs]'); return p.scrollHeight - p.scrollTop - p.clientHeight;")
    assert at_bottom < 4, at_bottom
    assert ops.session.post(f"{ops.instances('ops-flow')}/reader/terminate").status_code == 200


def test_instance_lists_are_live_with_columns_filters_and_positions(stack, browser, ops):
    from selenium.webdriver.common.by import By

    for i in range(52):
        ops.start("ops-other", f"bulk-{i:03d}")
    ops.start("ops-other", "boom", {"crash": True})
    ops.wait("ops-other", "boom", "errored")
    ops.wait("ops-other", "bulk-051", "waiting")
    _sign_in(browser, ops)
    browser.get(f"{ops.url}/ui/workflows/ops-other")
    row = browser.find_element(By.CSS_SELECTOR, "[data-instance=bulk-051]")
    assert row.find_element(By.CSS_SELECTOR, "[data-col=step]").text == "go wait"
    assert row.find_element(By.CSS_SELECTOR, "[data-col=wake]").text.startswith("times out in ")
    assert row.find_element(By.CSS_SELECTOR, "[data-col=duration]").text.endswith("so far")
    boom = browser.find_element(By.CSS_SELECTOR, "[data-instance=boom] [data-col=error]").text
    assert boom.startswith("step_failed: step failed after 1 attempt: ValueError"), boom
    position = _text(browser, "[data-testid=position]")
    assert position.startswith("Rows 1–50 of ") and "refreshes itself" in position, position
    total = int(position.split(" of ")[1].split(",")[0])
    browser.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
    assert _text(browser, "[data-testid=position]").startswith(f"Rows 51–{total} of {total}")

    # Several statuses at once; a time range.
    browser.get(f"{ops.url}/ui/workflows/ops-other")
    browser.find_element(By.ID, "f-st-errored").click()
    browser.find_element(By.ID, "f-st-terminated").click()
    browser.find_element(By.ID, "f-prefix").submit()
    _wait(lambda: "status=errored&status=terminated" in browser.current_url, what="two statuses")
    ids = [e.get_attribute("data-instance") for e in browser.find_elements(By.CSS_SELECTOR, "[data-instance]")]
    assert ids == ["boom"], ids
    browser.get(f"{ops.url}/ui/workflows/ops-other?from=2099-01-01T00:00")
    assert _text(browser, "[data-testid=empty]").startswith("No instance matches this filter")
    browser.get(f"{ops.url}/ui/workflows/ops-other?to=2099-01-01T00:00&prefix=bulk-05")
    ids = [e.get_attribute("data-instance") for e in browser.find_elements(By.CSS_SELECTOR, "[data-instance]")]
    assert ids == ["bulk-051", "bulk-050"], ids

    # The first page follows new instances without a reload.
    browser.get(f"{ops.url}/ui/workflows/ops-other")
    browser.execute_script("window.__stay = 1;")
    ops.start("ops-other", "newcomer")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "[data-instance=newcomer]"), timeout=20,
          what="the new instance listed live")
    assert browser.execute_script("return window.__stay;") == 1
