"""Bad input gets a clear JSON error and changes nothing (docs/spec/host-features.md#hf-foundation; docs/spec/http-api.md, API-json).

Every request of the matrix is answered with the §2.4 envelope and the expected status/code, and
the database holds exactly what it held before: row counts and a content hash of every table
(restricted to the two Spaces involved, see ``snapshot``) are compared before and after.
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest

from tests.integration.test_resources_support import (
    FORMS,
    create_ok,
    deployed_worker,
    settle,
    snapshot,
    version_spec,
)


@pytest.fixture(scope="module")
def world(app, db_url):
    """Space A with a deployed Worker, a Workflow and a Trigger; Space B with a Worker; a deleted UID."""
    from models import db as models_db
    from services import tokens

    suffix = uuid.uuid4().hex[:8]
    with models_db.session_scope(db_url) as session:
        a, b = f"bad-a-{suffix}", f"bad-b-{suffix}"
        token_a = tokens.create_token_txn(session, space=a)
        token_b = tokens.create_token_txn(session, space=b)
    client = app.test_client()
    worker, version, deployment = deployed_worker(client, a, token_a)
    workflow = create_ok(
        client,
        a,
        token_a,
        "DurableWorkflow",
        {"worker": {"resourceUid": worker}, "className": "ReportWorkflow"},
    )
    trigger = create_ok(
        client, a, token_a, "WorkerCronTrigger", {"worker": {"resourceUid": worker}, "cron": "0 9 * * *"}
    )
    foreign = create_ok(client, b, token_b, "ModuleWorker", {})
    deleted = create_ok(client, a, token_a, "ModuleWorker", {})
    op = client.delete(
        f"/v2/spaces/{a}/resources/{deleted}",
        headers={"Authorization": f"Bearer {token_a}", "Idempotency-Key": uuid.uuid4().hex},
    )
    settle(op.get_json()["id"])
    return {
        "a": a,
        "b": b,
        "token": token_a,
        "worker": worker,
        "version": version,
        "deployment": deployment,
        "workflow": workflow,
        "trigger": trigger,
        "foreign": foreign,
        "deleted": deleted,
    }


def valid_specs(w: dict) -> dict:
    ref = {"resourceUid": w["worker"]}
    return {
        "ModuleWorker": {"description": "d"},
        "WorkerVersion": {
            **version_spec(w["worker"]),
            "vars": {"A": {"b": [1]}},
            "workflowBindings": [{"name": "ORDERS", "resource": {"resourceUid": w["workflow"]}}],
        },
        "WorkerDeployment": {
            "worker": dict(ref),
            "versions": [{"version": {"resourceUid": w["version"]}, "weight": 100}],
        },
        "DurableWorkflow": {"worker": dict(ref), "className": "ReportWorkflow"},
        "WorkerCronTrigger": {"worker": dict(ref), "cron": "0 9 * * *"},
    }


def create_body(form: str, spec: dict, name: str = "bad-input") -> dict:
    return {"form": FORMS[form], "name": name, "spec": spec}


def nested_sites(spec: object, path: tuple = ()) -> list[tuple]:
    """Every path to an object inside ``spec`` (the root included)."""
    sites = []
    if isinstance(spec, dict):
        sites.append(path)
        for key, value in spec.items():
            if key not in ("modules", "vars"):  # open maps: their keys are data, not fields
                sites += nested_sites(value, (*path, key))
    elif isinstance(spec, list):
        for index, value in enumerate(spec):
            sites += nested_sites(value, (*path, index))
    return sites


def with_unknown_key(spec: dict, path: tuple) -> dict:
    spec = copy.deepcopy(spec)
    target = spec
    for step in path:
        target = target[step]
    target["unexpected"] = True
    return spec


def with_value(spec: dict, field: str, value: object) -> dict:
    spec = copy.deepcopy(spec)
    spec[field] = value
    return spec


def matrix(w: dict) -> list[tuple]:
    """``(label, method, path, body bytes | json | None, headers, status, code)``."""
    base = f"/v2/spaces/{w['a']}/resources"
    specs = valid_specs(w)
    cases: list[tuple] = []
    mw = FORMS["ModuleWorker"]
    mwb = mw.encode()
    raw = [
        ("truncated json", b'{"form": '),
        ("not json", b"hello"),
        ("NaN", (b'{"form": "%s", "name": "x", "spec": {"description": NaN}}' % mwb)),
        ("Infinity", (b'{"form": "%s", "name": "x", "spec": {"n": Infinity}}' % mwb)),
        ("-Infinity", (b'{"form": "%s", "name": "x", "spec": {"n": -Infinity}}' % mwb)),
        ("duplicate key", (b'{"form": "%s", "name": "x", "name": "y", "spec": {}}' % mwb)),
        (
            "nested duplicate key",
            (b'{"form": "%s", "name": "x", "spec": {"description": "a", "description": "b"}}' % mwb),
        ),
        ("invalid utf-8", b'{"form": "\xff\xfe", "name": "x", "spec": {}}'),
        ("lone surrogate", (b'{"form": "%s", "name": "\\ud800", "spec": {}}' % mwb)),
        (
            "lone low surrogate",
            (b'{"form": "%s", "name": "x", "spec": {"description": "a\\udc00"}}' % mwb),
        ),
        ("bom", b"\xef\xbb\xbf" + json.dumps(create_body("ModuleWorker", {})).encode()),
        ("empty body", b""),
    ]
    for label, body in raw:
        cases.append((label, "POST", base, body, {}, 400, "invalid_json"))
    cases.append(
        (
            "20 MiB body",
            "POST",
            base,
            b'{"form": "' + b"x" * (20 * 1024 * 1024) + b'"}',
            {},
            413,
            "document_too_large",
        )
    )
    cases.append(("array body", "POST", base, [], {}, 400, "invalid_request"))
    cases.append(
        (
            "unsupported form",
            "POST",
            base,
            {"form": mw.replace("0.3.0", "0.4.0"), "name": "x", "spec": {}},
            {},
            400,
            "unsupported_form",
        )
    )
    cases.append(
        (
            "unknown envelope key",
            "POST",
            base,
            {**create_body("ModuleWorker", {}), "labels": {}},
            {},
            400,
            "invalid_spec",
        )
    )
    cases.append(
        (
            "private inputs",
            "POST",
            base,
            {**create_body("ModuleWorker", {}), "privateInputs": {"k": "v"}},
            {},
            400,
            "invalid_spec",
        )
    )
    for form, spec in specs.items():
        for path in nested_sites(spec):
            cases.append(
                (
                    f"{form} unknown key at /{'/'.join(map(str, path))}",
                    "POST",
                    base,
                    create_body(form, with_unknown_key(spec, path)),
                    {},
                    400,
                    "invalid_spec",
                )
            )
        for field in spec:
            cases.append(
                (
                    f"{form} null {field}",
                    "POST",
                    base,
                    create_body(form, with_value(spec, field, None)),
                    {},
                    400,
                    "invalid_spec",
                )
            )
            cases.append(
                (
                    f"{form} wrong type {field}",
                    "POST",
                    base,
                    create_body(form, with_value(spec, field, [12])),
                    {},
                    400,
                    "invalid_spec",
                )
            )
        if "worker" in spec:
            for label, uid, status, code in [
                ("another Space's", w["foreign"], 404, "reference_not_found"),
                ("a deleted", w["deleted"], 404, "reference_not_found"),
                ("an unknown", str(uuid.uuid4()), 404, "reference_not_found"),
                ("a wrong-Form", w["workflow"], 409, "dependency_conflict"),
            ]:
                bad = with_value(spec, "worker", {"resourceUid": uid})
                cases.append(
                    (
                        f"{form} worker is {label} resource",
                        "POST",
                        base,
                        create_body(form, bad),
                        {},
                        status,
                        code,
                    )
                )
    bad_binding = copy.deepcopy(specs["WorkerVersion"])
    bad_binding["workflowBindings"][0]["resource"]["resourceUid"] = w["trigger"]
    cases.append(
        (
            "binding to a wrong-Form resource",
            "POST",
            base,
            create_body("WorkerVersion", bad_binding),
            {},
            409,
            "dependency_conflict",
        )
    )
    for key_label, key in [
        ("missing", None),
        ("empty", ""),
        ("too long", "k" * 256),
        ("non-ascii", "kéy"),
        ("control char", "a\x01b"),
    ]:
        headers = {"Idempotency-Key": key} if key is not None else {"Idempotency-Key": None}
        cases.append(
            (
                f"{key_label} Idempotency-Key on POST",
                "POST",
                base,
                create_body("ModuleWorker", {}),
                headers,
                400,
                "idempotency_key_required",
            )
        )
        cases.append(
            (
                f"{key_label} Idempotency-Key on PUT",
                "PUT",
                f"{base}/{w['worker']}",
                {"spec": {}},
                headers,
                400,
                "idempotency_key_required",
            )
        )
        cases.append(
            (
                f"{key_label} Idempotency-Key on DELETE",
                "DELETE",
                f"{base}/{w['trigger']}",
                None,
                headers,
                400,
                "idempotency_key_required",
            )
        )
    put_cases = [
        (
            "PUT unknown spec key",
            w["workflow"],
            {"spec": with_unknown_key(specs["DurableWorkflow"], ())},
            400,
            "invalid_spec",
        ),
        (
            "PUT unknown nested key",
            w["deployment"],
            {"spec": with_unknown_key(specs["WorkerDeployment"], ("versions", 0, "version"))},
            400,
            "invalid_spec",
        ),
        ("PUT null spec", w["workflow"], {"spec": None}, 400, "invalid_spec"),
        (
            "PUT changes className",
            w["workflow"],
            {"spec": with_value(specs["DurableWorkflow"], "className", "B")},
            409,
            "immutable_field",
        ),
        (
            "PUT changes trigger worker",
            w["trigger"],
            {"spec": with_value(specs["WorkerCronTrigger"], "worker", {"resourceUid": w["version"]})},
            409,
            "immutable_field",
        ),
        ("PUT of a deleted resource", w["deleted"], {"spec": {}}, 404, "not_found"),
        (
            "PUT invalid cron",
            w["trigger"],
            {"spec": with_value(specs["WorkerCronTrigger"], "cron", "* * * *")},
            400,
            "invalid_spec",
        ),
    ]
    for label, uid, body, status, code in put_cases:
        cases.append((label, "PUT", f"{base}/{uid}", body, {}, status, code))
    cases.append(
        (
            "PUT NaN",
            "PUT",
            f"{base}/{w['worker']}",
            b'{"spec": {"description": NaN}}',
            {},
            400,
            "invalid_json",
        )
    )
    cases.append(
        ("DELETE a Worker in use", "DELETE", f"{base}/{w['worker']}", None, {}, 409, "dependency_conflict")
    )
    cases.append(
        (
            "DELETE a weighted Version",
            "DELETE",
            f"{base}/{w['version']}",
            None,
            {},
            409,
            "dependency_conflict",
        )
    )
    cases.append(
        (
            "DELETE unknown",
            "DELETE",
            f"{base}/00000000-0000-4000-8000-00000000dead",
            None,
            {},
            404,
            "not_found",
        )
    )
    cases.append(
        ("content-type text/plain", "POST", base, b"{}", {"Content-Type": "text/plain"}, 400, "invalid_json")
    )
    return cases


def _ids():
    fake = {
        k: "00000000-0000-4000-8000-000000000000"
        for k in ("worker", "version", "deployment", "workflow", "trigger", "foreign", "deleted")
    }
    fake.update(a="a", b="b", token="t")
    return [case[0] for case in matrix(fake)]


@pytest.mark.parametrize("label", _ids())
def test_bad_input_is_rejected_with_json_and_changes_nothing(label, world, app, db_url):
    case = next(c for c in matrix(world) if c[0] == label)
    _, method, path, body, extra_headers, status, code = case
    headers = {"Authorization": f"Bearer {world['token']}", "Idempotency-Key": uuid.uuid4().hex}
    for name, value in extra_headers.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    kwargs: dict = {"headers": headers}
    if isinstance(body, bytes):
        kwargs["data"] = body
        kwargs.setdefault("content_type", headers.pop("Content-Type", "application/json"))
    elif body is not None:
        kwargs["json"] = body
    before = snapshot(db_url, [world["a"], world["b"]])
    response = app.test_client().open(path, method=method, **kwargs)
    after = snapshot(db_url, [world["a"], world["b"]])
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert response.is_json
    error = response.get_json()["error"]
    assert error["code"] == code and error["message"]
    assert "Traceback" not in error["message"]
    assert after == before
