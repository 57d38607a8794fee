"""The HTTP client's error mapping, id encoding and retry rules (host_cli.client), and how the CLI
prints client errors (host_cli.common, through the host_cli.instances commands). No
network: requests are served in-process by a tiny Flask stub through a ``requests`` transport
adapter (the brief allows a stub only here)."""

from __future__ import annotations

import json
import urllib.parse

import flask
import pytest
import requests
from click.testing import CliRunner

from host_cli import client as http
from host_cli import instances as cli_instances

BASE = "http://host.test"


class WSGIAdapter(requests.adapters.BaseAdapter):
    """Serve ``requests`` calls with a WSGI app in-process; ``fail_first`` raises ConnectionError
    for the first N sends. Records every sent ``(method, url, headers)``."""

    def __init__(
        self, app: flask.Flask, *, fail_first: int = 0, failure: type[Exception] = requests.ConnectionError
    ):
        super().__init__()
        self.client = app.test_client()
        self.fail_first = fail_first
        self.failure = failure
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    def send(self, request, **kwargs):  # noqa: ANN001, ANN201 - requests adapter API
        self.sent.append((request.method, request.url, dict(request.headers)))
        if len(self.sent) <= self.fail_first:
            raise self.failure("simulated network failure")
        split = urllib.parse.urlsplit(request.url)
        raw = split.path + (f"?{split.query}" if split.query else "")
        answer = self.client.open(
            split.path,
            method=request.method,
            query_string=split.query,
            headers=dict(request.headers),
            data=request.body,
            environ_overrides={"REQUEST_URI": raw, "RAW_URI": raw},
        )
        response = requests.Response()
        response.status_code = answer.status_code
        response.headers = requests.structures.CaseInsensitiveDict(answer.headers)
        response._content = answer.get_data()
        response.reason = answer.status.split(" ", 1)[-1]
        response.url = request.url
        response.request = request
        return response

    def close(self) -> None:
        pass


def make_client(app: flask.Flask, **adapter_options) -> tuple[http.Client, WSGIAdapter]:
    adapter = WSGIAdapter(app, **adapter_options)
    session = requests.Session()
    session.mount(BASE, adapter)
    return http.Client(
        base_url=BASE + "/", token="tok", space="dev", retry_wait=0.001, session=session
    ), adapter


def stub_app() -> flask.Flask:
    """A stand-in for the host: each path segment of the raw request URI is decoded on its own."""
    app = flask.Flask("stub")

    @app.route("/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
    def everything(rest: str):  # noqa: ANN202
        raw_path = flask.request.environ["REQUEST_URI"].split("?", 1)[0]
        segments = [urllib.parse.unquote(s) for s in raw_path.split("/")[1:]]
        if segments[-1] == "error":
            code, status = flask.request.args["code"], int(flask.request.args["status"])
            details = {"pointer": "/spec/worker"} if code == "invalid_spec" else None
            body = {"error": {"code": code, "message": f"the {code} message"}}
            if details:
                body["error"]["details"] = details
            return flask.Response(json.dumps(body), status=status, mimetype="application/json")
        if segments[-1] == "html":
            return flask.Response("<html>Bad Gateway</html>", status=502, mimetype="text/html")
        if segments[-1] == "not-json":
            return flask.Response("ok", status=200, mimetype="text/plain")
        return flask.jsonify(
            {
                "segments": segments,
                "method": flask.request.method,
                "auth": flask.request.headers.get("Authorization"),
                "key": flask.request.headers.get("Idempotency-Key"),
                "query": flask.request.args.to_dict(),
                "body": flask.request.get_json(silent=True),
            }
        )

    return app


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("unknown_instance", 404),
        ("instance_exists", 409),
        ("resource_busy", 409),
        ("invalid_spec", 400),
        ("idempotency_key_reused", 422),
        ("event_queue_full", 429),
        ("backend_unavailable", 503),
        ("unauthenticated", 401),
    ],
)
def test_error_envelope_becomes_client_error(code: str, status: int) -> None:
    api, _ = make_client(stub_app())
    with pytest.raises(http.ClientError) as caught:
        api._request("GET", "/error", query={"code": code, "status": status})
    err = caught.value
    assert (err.code, err.message, err.status) == (code, f"the {code} message", status)
    assert str(err) == f"{code}: the {code} message"
    assert err.details == ({"pointer": "/spec/worker"} if code == "invalid_spec" else {})
    assert not isinstance(err, http.HostUnreachable)


def test_an_answer_without_the_envelope_is_bad_response() -> None:
    api, _ = make_client(stub_app())
    with pytest.raises(http.ClientError) as caught:
        api._request("GET", "/html")
    assert (caught.value.code, caught.value.status) == ("bad_response", 502)
    with pytest.raises(http.ClientError) as caught:
        api._request("GET", "/not-json")
    assert (caught.value.code, caught.value.status) == ("bad_response", 200)


INSTANCE_IDS = [
    "order-42",
    "a/b",
    "50%",
    "x?y#z",
    "sp ace",
    "😀",
    ".",
    "..",
    "...",
    "\x00nul",
    "%2F",
    "é/../x",
]


@pytest.mark.parametrize("instance_id", INSTANCE_IDS)
def test_instance_id_is_one_path_segment_on_every_call(instance_id: str) -> None:
    api, adapter = make_client(stub_app())
    answers = [
        api.get_instance("wf-uid", instance_id),
        api.send_event("wf-uid", instance_id, event_type="shipped", idempotency_key="k1"),
        api.terminate_instance("wf-uid", instance_id),
        api.get_history("wf-uid", instance_id),
        api.list_events("wf-uid", instance_id),
    ]
    for answer, tail in zip(answers, [[], ["events"], ["terminate"], ["history"], ["events"]], strict=True):
        assert answer["segments"] == [
            "v2",
            "spaces",
            "dev",
            "resources",
            "wf-uid",
            "instances",
            instance_id,
            *tail,
        ]
    for _, url, _ in adapter.sent:
        assert f"/instances/{http.encode_segment(instance_id)}" in url


def test_encode_segment() -> None:
    assert http.encode_segment("a/b c?d#e%f") == "a%2Fb%20c%3Fd%23e%25f"
    assert http.encode_segment(".") == "%2E"
    assert http.encode_segment("..") == "%2E%2E"
    assert http.encode_segment(".a") == ".a"
    assert http.encode_segment("😀") == "%F0%9F%98%80"


def test_headers_query_and_body() -> None:
    api, _ = make_client(stub_app())
    answer = api.create_resource(
        form=http.FORM_URLS["ModuleWorker"], name="orders", spec={}, idempotency_key="k-1"
    )
    assert answer["method"] == "POST"
    assert answer["auth"] == "Bearer tok"
    assert answer["key"] == "k-1"
    assert answer["body"] == {"form": http.FORM_URLS["ModuleWorker"], "name": "orders", "spec": {}}
    listed = api.list_instances("wf", status="waiting", page_token="p/2")
    assert listed["query"] == {"status": "waiting", "pageToken": "p/2"}
    created = api.create_instance("wf", instance_id="i-1", params={"a": 1})
    assert created["body"] == {"id": "i-1", "params": {"a": 1}}
    assert api.create_instance("wf")["body"] == {}


def test_reads_are_retried_on_connection_errors() -> None:
    api, adapter = make_client(stub_app(), fail_first=2)
    assert api.get_instance("wf", "i")["method"] == "GET"
    assert len(adapter.sent) == 3


def test_read_timeouts_are_retried_for_reads_too() -> None:
    api, adapter = make_client(stub_app(), fail_first=1, failure=requests.ReadTimeout)
    api.get_resource("uid")
    assert len(adapter.sent) == 2


def test_keyed_mutations_are_retried_with_the_same_key() -> None:
    api, adapter = make_client(stub_app(), fail_first=2)
    api.update_resource("uid", spec={}, idempotency_key="same-key")
    assert len(adapter.sent) == 3
    assert {headers["Idempotency-Key"] for _, _, headers in adapter.sent} == {"same-key"}


def test_create_instance_is_never_retried() -> None:
    api, adapter = make_client(stub_app(), fail_first=1)
    with pytest.raises(http.HostUnreachable) as caught:
        api.create_instance("wf", instance_id="i")
    assert len(adapter.sent) == 1
    assert caught.value.code == "unreachable"
    assert caught.value.status is None
    assert "cannot reach the host at http://host.test" in caught.value.message


def test_send_event_without_a_key_is_not_retried() -> None:
    api, adapter = make_client(stub_app(), fail_first=1)
    with pytest.raises(http.HostUnreachable):
        api.send_event("wf", "i", event_type="t")
    assert len(adapter.sent) == 1


def test_retries_give_up_after_the_attempts() -> None:
    api, adapter = make_client(stub_app(), fail_first=100)
    with pytest.raises(http.HostUnreachable):
        api.get_instance("wf", "i")
    assert len(adapter.sent) == 4


def test_a_timeout_on_a_mutation_says_it_may_have_been_applied() -> None:
    api, _ = make_client(stub_app(), fail_first=1, failure=requests.ReadTimeout)
    with pytest.raises(http.HostUnreachable) as caught:
        api.create_instance("wf")
    assert caught.value.code == "timeout"
    assert "may have been applied" in caught.value.message


def pages_app() -> flask.Flask:
    app = flask.Flask("pages")
    pages = {None: (["a", "b"], "t2"), "t2": (["c"], "t3"), "t3": (["d"], None)}
    operations = iter(["pending", "running", "running", "succeeded"])

    @app.get("/v2/spaces/dev/resources/wf/instances")
    def instances():  # noqa: ANN202
        ids, token = pages[flask.request.args.get("pageToken")]
        body = {"instances": [{"id": i, "status": "running", "createdAt": "t"} for i in ids]}
        if token:
            body["nextPageToken"] = token
        return flask.jsonify(body)

    @app.get("/v2/spaces/dev/operations/op-1")
    def operation():  # noqa: ANN202
        return flask.jsonify({"id": "op-1", "state": next(operations)})

    @app.get("/v2/spaces/dev/resources")
    def resources():  # noqa: ANN202
        return flask.jsonify(
            {
                "resources": [
                    {"uid": "1", "name": "w", "form": http.FORM_URLS["ModuleWorker"]},
                    {"uid": "2", "name": "d", "form": "DurableWorkflow"},
                    {"uid": "3", "name": "e", "form": http.FORM_URLS["DurableWorkflow"]},
                ]
            }
        )

    return app


def test_iterators_follow_next_page_tokens() -> None:
    api, adapter = make_client(pages_app())
    assert [row["id"] for row in api.iter_instances("wf")] == ["a", "b", "c", "d"]
    assert len(adapter.sent) == 3


def test_iter_resources_filters_by_form_url_or_short_name() -> None:
    api, _ = make_client(pages_app())
    assert [r["uid"] for r in api.iter_resources(form=http.FORM_URLS["DurableWorkflow"])] == ["2", "3"]
    assert [r["uid"] for r in api.iter_resources()] == ["1", "2", "3"]


def test_wait_operation_polls_until_finished() -> None:
    api, _ = make_client(pages_app())
    seen: list[str] = []
    operation = api.wait_operation("op-1", interval=0.001, on_poll=lambda op: seen.append(op["state"]))
    assert operation["state"] == "succeeded"
    assert seen == ["pending", "running", "running", "succeeded"]


# --- how the CLI prints client errors ---------------------------------------------------------


def cli_app() -> flask.Flask:
    app = flask.Flask("cli")

    @app.get("/v2/spaces/dev/resources")
    def resources():  # noqa: ANN202
        return flask.jsonify(
            {
                "resources": [
                    {"uid": "wf-uid", "name": "orders", "form": http.FORM_URLS["DurableWorkflow"]},
                ]
            }
        )

    @app.get("/v2/spaces/dev/resources/wf-uid/instances/<path:instance_id>")
    def status(instance_id: str):  # noqa: ANN202
        if instance_id == "missing":
            return flask.Response(
                json.dumps({"error": {"code": "unknown_instance", "message": "no instance 'missing'"}}),
                status=404,
                mimetype="application/json",
            )
        return flask.jsonify({"id": instance_id, "status": "complete", "output": {"b": 2, "a": 1}})

    return app


@pytest.fixture()
def cli_with_stub(monkeypatch: pytest.MonkeyPatch):
    """Run CLI commands whose Client talks to ``cli_app`` in-process."""
    adapter = WSGIAdapter(cli_app())
    real_client = http.Client

    def client_with_stub(**kwargs):  # noqa: ANN202
        session = requests.Session()
        session.mount(BASE, adapter)
        return real_client(**{**kwargs, "session": session, "retry_wait": 0.001})

    monkeypatch.setattr(http, "Client", client_with_stub)

    def run(*args: str):  # noqa: ANN202
        return CliRunner().invoke(cli_instances.instances, [*args, "--url", BASE, "--token", "tok"])

    return run


def test_cli_prints_the_api_code_and_message_without_traceback(cli_with_stub) -> None:
    result = cli_with_stub("status", "orders", "missing")
    assert result.exit_code == 1
    assert result.stderr == "error: unknown_instance: no instance 'missing'\n"
    assert result.stdout == ""


def test_cli_unknown_workflow_is_not_found(cli_with_stub) -> None:
    result = cli_with_stub("status", "nope", "i-1")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: not_found: no DurableWorkflow named 'nope' in Space 'dev'\n")


def test_cli_json_output_is_stable(cli_with_stub) -> None:
    result = cli_with_stub("status", "orders", "i/1", "--json")
    assert result.exit_code == 0, result.stderr
    assert (
        result.stdout
        == json.dumps(
            {"id": "i/1", "status": "complete", "output": {"a": 1, "b": 2}}, sort_keys=True, indent=2
        )
        + "\n"
    )


def test_cli_rejects_bad_params_before_any_request(cli_with_stub) -> None:
    result = cli_with_stub("create", "orders", "--params", '{"a": NaN}')
    assert result.exit_code == 1
    assert result.stderr.startswith("error: invalid_json: --params is not valid JSON")
    result = cli_with_stub("create", "orders", "--params", "[1, 2]")
    assert result.stderr.startswith("error: invalid_params: --params must be a JSON object")


def test_cli_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAKOHOST_TOKEN", raising=False)
    result = CliRunner().invoke(cli_instances.instances, ["list", "orders"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unauthenticated: no token")


def test_cli_unreachable_host(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = WSGIAdapter(cli_app(), fail_first=100)
    real_client = http.Client

    def client_with_stub(**kwargs):  # noqa: ANN202
        session = requests.Session()
        session.mount(BASE, adapter)
        return real_client(**{**kwargs, "session": session, "retry_wait": 0.001})

    monkeypatch.setattr(http, "Client", client_with_stub)
    result = CliRunner().invoke(cli_instances.instances, ["list", "orders", "--url", BASE, "--token", "t"])
    assert result.exit_code == 1
    assert result.stderr == f"error: unreachable: cannot reach the host at {BASE}\n"
    assert "Traceback" not in result.output
