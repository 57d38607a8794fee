"""The resource API through a real HTTP server (gunicorn) and a real Celery worker process.

Covers the whole path: strict parsing on the wire, ``202`` + ``Location``, the worker's reconcile
(including sandboxed WorkerVersion validation that survives ``sys.exit``), idempotent replays
across an API restart, and ``413`` for a 20 MiB body.
"""

from __future__ import annotations

import time
import uuid

import requests

FORMS = {
    "ModuleWorker": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
    "WorkerVersion": "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
    "WorkerDeployment": "https://edge.forms.takoform.com/forms/WorkerDeployment/0.4.0/",
    "DurableWorkflow": "https://edge.forms.takoform.com/forms/DurableWorkflow/0.3.0/",
}
MAIN = (
    "class ReportWorkflow:\n    def __init__(self, env):\n        self.env = env\n"
    "    def run(self, event, step):\n        return {}\n"
)


class Client:
    def __init__(self, base: str, space: str, token: str) -> None:
        self.base, self.space, self.token = base, space, token

    def call(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        key: str | None = "auto",
        raw: bytes | None = None,
    ) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        if key is not None and method != "GET":
            headers["Idempotency-Key"] = uuid.uuid4().hex if key == "auto" else key
        if raw is not None:
            headers["Content-Type"] = "application/json"
            return requests.request(method, self.base + path, data=raw, headers=headers, timeout=30)
        return requests.request(method, self.base + path, json=body, headers=headers, timeout=30)

    def create(self, form: str, spec: dict, *, key: str | None = "auto", name: str | None = None):
        body = {"form": FORMS[form], "name": name or f"e2e-{uuid.uuid4().hex[:8]}", "spec": spec}
        return self.call("POST", f"/v2/spaces/{self.space}/resources", body=body, key=key)

    def wait(self, response: requests.Response, timeout: float = 60.0) -> dict:
        assert response.status_code == 202, response.text
        location = response.headers["Location"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            op = self.call("GET", location).json()
            if op["state"] in ("succeeded", "failed"):
                return op
            time.sleep(0.1)
        raise AssertionError(f"Operation {location} not finished: {op}")

    def resource(self, uid: str) -> dict:
        return self.call("GET", f"/v2/spaces/{self.space}/resources/{uid}").json()


def test_resources_through_real_api_and_worker(api_server, worker, space_token):
    space, token = space_token
    api = Client(api_server.extra["url"], space, token)

    worker_op = api.wait(api.create("ModuleWorker", {"description": "e2e"}))
    assert worker_op["state"] == "succeeded"
    worker_uid = worker_op["resourceUid"]

    exits = api.wait(
        api.create(
            "WorkerVersion",
            {
                "worker": {"resourceUid": worker_uid},
                "mainModule": "main.py",
                "modules": {"main.py": "import sys\nsys.exit(0)\n"},
            },
        )
    )
    assert (
        exits["state"] == "failed"
        and exits["effect"] == "partial"
        and "SystemExit" in exits["error"]["message"]
    )

    good = api.wait(
        api.create(
            "WorkerVersion",
            {"worker": {"resourceUid": worker_uid}, "mainModule": "main.py", "modules": {"main.py": MAIN}},
        )
    )
    assert good["state"] == "succeeded"  # the worker survived the sys.exit above
    version = api.resource(good["resourceUid"])
    assert version["observed"] == {"validated": True, "workflowClasses": ["ReportWorkflow"], "handlers": []}

    workflow = api.wait(
        api.create("DurableWorkflow", {"worker": {"resourceUid": worker_uid}, "className": "ReportWorkflow"})
    )
    assert api.resource(workflow["resourceUid"])["observed"]["ready"] is False
    deployment = api.wait(
        api.create(
            "WorkerDeployment",
            {
                "worker": {"resourceUid": worker_uid},
                "versions": [{"version": {"resourceUid": good["resourceUid"]}, "weight": 100}],
            },
        )
    )
    assert deployment["state"] == "succeeded"
    assert api.resource(workflow["resourceUid"])["observed"]["ready"] is True

    # Strict JSON on the wire, and a body over the limit.
    nan = api.call(
        "POST",
        f"/v2/spaces/{space}/resources",
        raw=b'{"form": "%s", "name": "n", "spec": {"description": NaN}}' % FORMS["ModuleWorker"].encode(),
    )
    assert nan.status_code == 400 and nan.json()["error"]["code"] == "invalid_json"
    huge = api.call("POST", f"/v2/spaces/{space}/resources", raw=b" " * (20 * 1024 * 1024))
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "document_too_large"

    # A busy resource, then a lasting dependency: never confused. The Version's import takes
    # 3 s, so its create Operation is certainly unfinished when the DELETE arrives.
    slow = api.create(
        "WorkerVersion",
        {
            "worker": {"resourceUid": worker_uid},
            "mainModule": "main.py",
            "modules": {"main.py": "import time\ntime.sleep(3)\n" + MAIN},
        },
    )
    busy = api.call("DELETE", f"/v2/spaces/{space}/resources/{slow.json()['resourceUid']}")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "resource_busy"
    assert api.wait(slow)["state"] == "succeeded"
    put = api.call(
        "PUT",
        f"/v2/spaces/{space}/resources/{workflow['resourceUid']}",
        body={"spec": {"worker": {"resourceUid": worker_uid}, "className": "ReportWorkflow"}},
    )
    assert put.status_code == 202
    assert api.wait(put)["generation"] == 2
    in_use = api.call("DELETE", f"/v2/spaces/{space}/resources/{worker_uid}")
    assert in_use.status_code == 409 and in_use.json()["error"]["code"] == "dependency_conflict"


def test_same_key_returns_the_same_operation_after_an_api_restart(db_url, worker, space_token):
    from tests.support import processes

    space, token = space_token
    key = uuid.uuid4().hex
    first_api = processes.start_api()
    try:
        api = Client(first_api.extra["url"], space, token)
        first = api.create("ModuleWorker", {}, key=key, name="restart")
        assert first.status_code == 202
        op = api.wait(first)
    finally:
        first_api.stop()
    second_api = processes.start_api()
    try:
        api = Client(second_api.extra["url"], space, token)
        again = api.create("ModuleWorker", {}, key=key, name="restart")
        assert again.status_code == 202
        assert again.json()["id"] == op["id"] and again.json()["state"] == "succeeded"
        reused = api.create("ModuleWorker", {}, key=key, name="other-name")
        assert reused.status_code == 422 and reused.json()["error"]["code"] == "idempotency_key_reused"
    finally:
        second_api.stop()
