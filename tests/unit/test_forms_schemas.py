"""Closed-spec validation of the five Forms (docs/spec/http-api.md#api-res, docs/spec/worker-forms.md; docs/spec/durable-workflow.md/003 "未知のフィールド").

Pure: ``host_api.schemas`` never reads the database. Every rejection is ``invalid_spec`` with a
JSON pointer (relative to the request body) to the offending field.
"""

from __future__ import annotations

import copy

import pytest

from host_api import schemas
from models.errors import DomainError

URL = {
    "ModuleWorker": "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
    "WorkerVersion": "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
    "WorkerDeployment": "https://edge.forms.takoform.com/forms/WorkerDeployment/0.4.0/",
    "DurableWorkflow": "https://edge.forms.takoform.com/forms/DurableWorkflow/0.3.0/",
    "WorkerCronTrigger": "https://edge.forms.takoform.com/forms/WorkerCronTrigger/0.3.0/",
}
REF = {"resourceUid": "00000000-0000-4000-8000-000000000001"}
VALID = {
    "ModuleWorker": {"description": "orders"},
    "WorkerVersion": {
        "worker": REF,
        "mainModule": "main.py",
        "modules": {"main.py": "x = 1\n", "pkg/util.py": ""},
        "vars": {"CURRENCY": "EUR", "LIMITS": {"max": [1, 2]}},
        "workflowBindings": [{"name": "ORDERS", "resource": {"resourceUid": "wf-1"}}],
    },
    "WorkerDeployment": {
        "worker": REF,
        "versions": [
            {"version": {"resourceUid": "v1"}, "weight": 60},
            {"version": {"resourceUid": "v2"}, "weight": 40},
        ],
    },
    "DurableWorkflow": {"worker": REF, "className": "ReportWorkflow"},
    "WorkerCronTrigger": {"worker": REF, "cron": "*/5 * * * *"},
}


def body(form: str, spec: dict | None = None, **more) -> dict:
    return {
        "form": URL[form],
        "name": "my-res",
        "spec": copy.deepcopy(VALID[form] if spec is None else spec),
        **more,
    }


def rejected(b: dict) -> DomainError:
    with pytest.raises(DomainError) as info:
        schemas.validate_create(b)
    return info.value


@pytest.mark.parametrize("form", sorted(URL))
def test_valid_specs_are_accepted_with_the_short_form(form):
    result = schemas.validate_create(body(form))
    assert result.form == form and result.spec == VALID[form] and result.name == "my-res"


def test_module_worker_empty_spec_is_valid():
    assert schemas.validate_create(body("ModuleWorker", {})).spec == {}


# Every nested object of every Form, with the pointer of an unknown key placed in it.
UNKNOWN_KEY_SITES = [
    ("ModuleWorker", [], "/spec/extra"),
    ("WorkerVersion", [], "/spec/extra"),
    ("WorkerVersion", ["worker"], "/spec/worker/extra"),
    ("WorkerVersion", ["workflowBindings", 0], "/spec/workflowBindings/0/extra"),
    ("WorkerVersion", ["workflowBindings", 0, "resource"], "/spec/workflowBindings/0/resource/extra"),
    ("WorkerDeployment", [], "/spec/extra"),
    ("WorkerDeployment", ["worker"], "/spec/worker/extra"),
    ("WorkerDeployment", ["versions", 1], "/spec/versions/1/extra"),
    ("WorkerDeployment", ["versions", 0, "version"], "/spec/versions/0/version/extra"),
    ("DurableWorkflow", [], "/spec/extra"),
    ("DurableWorkflow", ["worker"], "/spec/worker/extra"),
    ("WorkerCronTrigger", [], "/spec/extra"),
    ("WorkerCronTrigger", ["worker"], "/spec/worker/extra"),
]


@pytest.mark.parametrize(("form", "path", "pointer"), UNKNOWN_KEY_SITES)
def test_unknown_keys_at_every_nesting_level_are_invalid_spec_with_pointer(form, path, pointer):
    spec = copy.deepcopy(VALID[form])
    target = spec
    for step in path:
        target = target[step]
    target["extra"] = 1
    error = rejected(body(form, spec))
    assert error.code == "invalid_spec"
    assert error.details["pointer"] == pointer


def test_unknown_envelope_key_is_rejected():
    error = rejected(body("ModuleWorker", surprise=True))
    assert (error.code, error.details["pointer"]) == ("invalid_spec", "/surprise")


REQUIRED = [
    ("WorkerVersion", "worker"),
    ("WorkerVersion", "mainModule"),
    ("WorkerVersion", "modules"),
    ("WorkerDeployment", "worker"),
    ("WorkerDeployment", "versions"),
    ("DurableWorkflow", "worker"),
    ("DurableWorkflow", "className"),
    ("WorkerCronTrigger", "worker"),
    ("WorkerCronTrigger", "cron"),
]


@pytest.mark.parametrize(("form", "field"), REQUIRED)
def test_null_for_a_required_field_is_invalid_spec(form, field):
    spec = copy.deepcopy(VALID[form])
    spec[field] = None
    error = rejected(body(form, spec))
    assert error.code == "invalid_spec" and error.details["pointer"] == f"/spec/{field}"


@pytest.mark.parametrize(("form", "field"), REQUIRED)
def test_missing_required_field_is_invalid_spec(form, field):
    spec = copy.deepcopy(VALID[form])
    del spec[field]
    error = rejected(body(form, spec))
    assert error.code == "invalid_spec" and error.details["pointer"] == f"/spec/{field}"


@pytest.mark.parametrize(
    ("form", "field", "value"),
    [
        ("ModuleWorker", "description", 5),
        ("ModuleWorker", "description", None),
        ("WorkerVersion", "mainModule", ["main.py"]),
        ("WorkerVersion", "modules", "main.py"),
        ("WorkerVersion", "vars", [1]),
        ("WorkerVersion", "workflowBindings", {"name": "X"}),
        ("WorkerDeployment", "versions", {"version": REF, "weight": 100}),
        ("DurableWorkflow", "className", 7),
        ("DurableWorkflow", "worker", "uid-as-string"),
        ("WorkerCronTrigger", "cron", 5),
    ],
)
def test_wrong_types_are_invalid_spec(form, field, value):
    spec = copy.deepcopy(VALID[form])
    spec[field] = value
    error = rejected(body(form, spec))
    assert error.code == "invalid_spec" and error.details["pointer"].startswith(f"/spec/{field}")


@pytest.mark.parametrize("resource_uid", [None, 5, "", {"x": 1}])
def test_reference_uid_must_be_a_nonempty_string(resource_uid):
    error = rejected(body("DurableWorkflow", {"worker": {"resourceUid": resource_uid}, "className": "A"}))
    assert error.details["pointer"] == "/spec/worker/resourceUid"


def test_form_url_must_be_exact():
    for url in [
        URL["ModuleWorker"].rstrip("/"),
        URL["ModuleWorker"].upper(),
        URL["ModuleWorker"] + " ",
        "https://edge.forms.takoform.com/forms/ModuleWorker/0.2.0/",
        "ModuleWorker",
    ]:
        error = rejected({"form": url, "name": "a", "spec": {}})
        assert error.code == "unsupported_form", url


def test_form_of_wrong_type_is_invalid_spec():
    assert rejected({"form": 5, "name": "a", "spec": {}}).details["pointer"] == "/form"


@pytest.mark.parametrize("bad", ["", "A", "-a", "a-", "a_b", "a" * 64, "é", "a.b", 5, None])
def test_resource_names(bad):
    error = rejected({"form": URL["ModuleWorker"], "name": bad, "spec": {}})
    assert (error.code, error.details["pointer"]) == ("invalid_spec", "/name")


@pytest.mark.parametrize("good", ["a", "0", "a-b", "a" * 63, "x1-2y"])
def test_valid_resource_names(good):
    assert schemas.validate_create({"form": URL["ModuleWorker"], "name": good, "spec": {}}).name == good


def test_description_length_limit():
    assert schemas.validate_create(body("ModuleWorker", {"description": "d" * 1024}))
    assert (
        rejected(body("ModuleWorker", {"description": "d" * 1025})).details["pointer"] == "/spec/description"
    )


@pytest.mark.parametrize("form", sorted(URL))
def test_nonempty_private_inputs_are_rejected_for_every_form(form):
    error = rejected(body(form, privateInputs={"k": "v"}))
    assert (error.code, error.details["pointer"]) == ("invalid_spec", "/privateInputs")
    assert schemas.validate_create(body(form, privateInputs={}))


@pytest.mark.parametrize(
    ("mutate", "pointer"),
    [
        (lambda s: s.update(mainModule="other.py"), "/spec/mainModule"),
        (lambda s: s.update(modules={}), "/spec/modules"),
        (
            lambda s: s.update(modules={f"m{i}.py": "" for i in range(65)}, mainModule="m0.py"),
            "/spec/modules",
        ),
        (lambda s: s["modules"].update({"bad-name.py": ""}), "/spec/modules/bad-name.py"),
        (lambda s: s["modules"].update({"noext": ""}), "/spec/modules/noext"),
        (lambda s: s["modules"].update({"../up.py": ""}), "/spec/modules/..~1up.py"),
        (lambda s: s["modules"].update({"x.py": 5}), "/spec/modules/x.py"),
        (lambda s: s["modules"].update({"big.py": "#" * (1024 * 1024 + 1)}), "/spec/modules/big.py"),
        (lambda s: s["modules"].update({f"b{i}.py": "#" * (1024 * 1024) for i in range(4)}), "/spec/modules"),
        (lambda s: s["vars"].update({"lower": 1}), "/spec/vars/lower"),
        (lambda s: s["vars"].update({"BIG": 2**60}), "/spec/vars/BIG"),
        (lambda s: s["vars"].update({"DEEP": {"a": [1, 2**60]}}), "/spec/vars/DEEP/a/1"),
        (lambda s: s["vars"].update({"ORDERS": 1}), "/spec/workflowBindings/0/name"),
        (
            lambda s: s["workflowBindings"].append({"name": "ORDERS", "resource": REF}),
            "/spec/workflowBindings/1/name",
        ),
        (lambda s: s["workflowBindings"][0].update(name="orders"), "/spec/workflowBindings/0/name"),
        (lambda s: s["workflowBindings"][0].update(resource=None), "/spec/workflowBindings/0/resource"),
    ],
)
def test_worker_version_rules(mutate, pointer):
    spec = copy.deepcopy(VALID["WorkerVersion"])
    mutate(spec)
    error = rejected(body("WorkerVersion", spec))
    assert (error.code, error.details["pointer"]) == ("invalid_spec", pointer), error.details


def test_worker_version_module_limits_are_inclusive():
    spec = copy.deepcopy(VALID["WorkerVersion"])
    spec["modules"] = {f"m{i}.py": "" for i in range(64)}
    spec["mainModule"] = "m0.py"
    assert schemas.validate_create(body("WorkerVersion", spec))
    spec["modules"] = {"main.py": "#" * (1024 * 1024)}
    spec["mainModule"] = "main.py"
    assert schemas.validate_create(body("WorkerVersion", spec))


@pytest.mark.parametrize(
    ("versions", "pointer"),
    [
        ([], "/spec/versions"),
        ([{"version": {"resourceUid": f"v{i}"}, "weight": 10} for i in range(11)], "/spec/versions"),
        ([{"version": {"resourceUid": "v1"}, "weight": 50}], "/spec/versions"),
        (
            [
                {"version": {"resourceUid": "v1"}, "weight": 50},
                {"version": {"resourceUid": "v1"}, "weight": 50},
            ],
            "/spec/versions/1/version/resourceUid",
        ),
        (
            [
                {"version": {"resourceUid": "v1"}, "weight": 0},
                {"version": {"resourceUid": "v2"}, "weight": 100},
            ],
            "/spec/versions/0/weight",
        ),
        ([{"version": {"resourceUid": "v1"}, "weight": 101}], "/spec/versions/0/weight"),
        ([{"version": {"resourceUid": "v1"}, "weight": 100.0}], "/spec/versions/0/weight"),
        ([{"version": {"resourceUid": "v1"}, "weight": True}], "/spec/versions/0/weight"),
        ([{"version": {"resourceUid": "v1"}, "weight": "100"}], "/spec/versions/0/weight"),
        ([{"version": {"resourceUid": "v1"}}], "/spec/versions/0/weight"),
        ([None], "/spec/versions/0"),
    ],
)
def test_worker_deployment_rules(versions, pointer):
    error = rejected(body("WorkerDeployment", {"worker": REF, "versions": versions}))
    assert (error.code, error.details["pointer"]) == ("invalid_spec", pointer), error.details


def test_deployment_of_ten_entries_summing_to_100_is_valid():
    versions = [{"version": {"resourceUid": f"v{i}"}, "weight": 10} for i in range(10)]
    assert schemas.validate_create(body("WorkerDeployment", {"worker": REF, "versions": versions}))


@pytest.mark.parametrize("class_name", ["", "1Abc", "a-b", "A" * 65, "Ä", "a b"])
def test_class_name_regex(class_name):
    error = rejected(body("DurableWorkflow", {"worker": REF, "className": class_name}))
    assert error.details["pointer"] == "/spec/className"


@pytest.mark.parametrize("class_name", ["A", "_x", "$dollar", "a$b", "A" * 64])
def test_class_name_regex_accepts_the_seed_alphabet(class_name):
    assert schemas.validate_create(body("DurableWorkflow", {"worker": REF, "className": class_name}))


@pytest.mark.parametrize(
    "expression",
    ["0 9 * * MON", "*/0 * * * *", "0 0 31 2", "@daily", "0  9 * * *", "90 * * * *", "0 0 * * 7", ""],
)
def test_cron_grammar_errors_are_invalid_spec(expression):
    error = rejected(body("WorkerCronTrigger", {"worker": REF, "cron": expression}))
    assert (error.code, error.details["pointer"]) == ("invalid_spec", "/spec/cron")


def test_API_04_cron_trigger_spec_rejections_are_closed_spec_errors():
    """API-04 (schema part): timezone field, extra reference key, null cron, non-empty privateInputs."""
    cases = [
        (
            {"worker": {"resourceUid": "W"}, "cron": "0 9 * * *", "timezone": "America/New_York"},
            {},
            "/spec/timezone",
        ),
        ({"worker": {"resourceUid": "W", "name": "x"}, "cron": "0 9 * * *"}, {}, "/spec/worker/name"),
        ({"worker": {"resourceUid": "W"}, "cron": None}, {}, "/spec/cron"),
        (
            {"worker": {"resourceUid": "W"}, "cron": "0 9 * * *"},
            {"privateInputs": {"k": "v"}},
            "/privateInputs",
        ),
    ]
    for spec, extra, pointer in cases:
        error = rejected({"form": URL["WorkerCronTrigger"], "name": "nightly", "spec": spec, **extra})
        assert (error.code, error.details["pointer"]) == ("invalid_spec", pointer)
    control = {
        "form": URL["WorkerCronTrigger"],
        "name": "nightly",
        "spec": {"worker": {"resourceUid": "W"}, "cron": "0 9 * * *"},
    }
    assert schemas.validate_create(control).form == "WorkerCronTrigger"


def test_update_envelope_is_closed_and_checks_the_forms_spec():
    assert (
        schemas.validate_update({"spec": VALID["DurableWorkflow"]}, form="DurableWorkflow")
        == VALID["DurableWorkflow"]
    )
    for b, pointer in [
        ({"spec": VALID["DurableWorkflow"], "name": "x"}, "/name"),
        ({}, "/spec"),
        ({"spec": None}, "/spec"),
        ({"spec": {**VALID["DurableWorkflow"], "z": 1}}, "/spec/z"),
        ({"spec": VALID["DurableWorkflow"], "privateInputs": {"a": "b"}}, "/privateInputs"),
    ]:
        with pytest.raises(DomainError) as info:
            schemas.validate_update(b, form="DurableWorkflow")
        assert (info.value.code, info.value.details["pointer"]) == ("invalid_spec", pointer)


def test_every_error_is_listed_with_its_pointer():
    spec = {"worker": {"resourceUid": 5, "x": 1}, "className": "1bad", "y": 2}
    error = rejected(body("DurableWorkflow", spec))
    pointers = {e["pointer"] for e in error.details["errors"]}
    assert pointers == {"/spec/worker/resourceUid", "/spec/worker/x", "/spec/className", "/spec/y"}
