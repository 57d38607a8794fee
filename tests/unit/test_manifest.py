"""``takohost.toml`` parsing and module collection (host_cli.manifest; docs/spec/host-features.md#hf-one-command)."""

from __future__ import annotations

import pathlib

import pytest

from host_cli import manifest
from takohost.domain import identifiers

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

MINIMAL = """
[worker]
name = "orders"
"""

FULL = """
[worker]
name = "orders"
main = "app/main.py"
description = "Order flow"

[vars]
CURRENCY = "EUR"
LIMITS = { daily = 5, ratio = 0.5, tags = ["a", "b"] }

[[workflows]]
name = "order-flow"
class = "OrderWorkflow"
binding = "ORDERS"

[[workflows]]
name = "refund-flow"
class = "_Refund"

[[triggers]]
name = "order-digest"
cron = "0 6 * * 1-5"
"""


def test_minimal_manifest_defaults() -> None:
    m = manifest.parse(MINIMAL)
    assert m == manifest.Manifest(worker="orders")
    assert m.main == "main.py"
    assert m.worker_spec() == {}
    assert m.deployment_name == "orders-deployment"


def test_full_manifest() -> None:
    m = manifest.parse(FULL)
    assert m.worker == "orders"
    assert m.main == "app/main.py"
    assert m.worker_spec() == {"description": "Order flow"}
    assert m.variables == {"CURRENCY": "EUR", "LIMITS": {"daily": 5, "ratio": 0.5, "tags": ["a", "b"]}}
    assert m.workflows == (
        manifest.WorkflowDecl(name="order-flow", class_name="OrderWorkflow", binding="ORDERS"),
        manifest.WorkflowDecl(name="refund-flow", class_name="_Refund", binding=None),
    )
    assert m.triggers == (manifest.TriggerDecl(name="order-digest", cron="0 6 * * 1-5"),)


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        ("[worker\nname=1", "", "not valid TOML"),
        ("name = 'x'", "name", "unknown key"),
        ("[vars]\nA = 1", "worker", "is required"),
        ("worker = 'orders'", "worker", "is required"),
        ("[worker]\nname = 'orders'\nmain_module = 'main.py'", "worker.main_module", "unknown key"),
        ("[worker]\nmain = 'main.py'", "worker.name", "is required"),
        ("[worker]\nname = 'Orders'", "worker.name", "not a resource name"),
        ("[worker]\nname = 'orders-'", "worker.name", "not a resource name"),
        ("[worker]\nname = '" + "a" * 64 + "'", "worker.name", "not a resource name"),
        ("[worker]\nname = 7", "worker.name", "must be a string"),
        ("[worker]\nname = 'orders'\nmain = 'main'", "worker.main", "module file name"),
        ("[worker]\nname = 'orders'\ndescription = '" + "d" * 1025 + "'", "worker.description", "1024"),
        ("[worker]\nname = 'o'\n[[workflows]]\nname = 'w'", "workflows[1].class", "is required"),
        (
            "[worker]\nname = 'o'\n[[workflows]]\nname = 'w'\nclass = '9Lives'",
            "workflows[1].class",
            "class name",
        ),
        (
            "[worker]\nname = 'o'\n[[workflows]]\nname = 'w'\nclass = 'Pay$'",
            "workflows[1].class",
            "class name",
        ),
        (
            "[worker]\nname = 'o'\n[[workflows]]\nname = 'w'\nclass = 'W'\nbinding = 'orders'",
            "workflows[1].binding",
            "must match",
        ),
        (
            "[worker]\nname = 'o'\n[[workflows]]\nname = 'w'\nclass = 'W'\nretries = 3",
            "workflows[1].retries",
            "unknown key",
        ),
        ("workflows = 'w'\n[worker]\nname = 'o'", "workflows", "array of tables"),
        (
            "[worker]\nname = 'o'\n[[triggers]]\nname = 't'\ncron = '0 0 * * 7'",
            "triggers[1].cron",
            "day-of-week",
        ),
        ("[worker]\nname = 'o'\n[[triggers]]\nname = 't'\ncron = '@daily'", "triggers[1].cron", "@daily"),
        ("[worker]\nname = 'o'\n[[triggers]]\nname = 't'", "triggers[1].cron", "is required"),
        (
            "[worker]\nname = 'o'\n[[triggers]]\nname = 't'\ncron = '* * * * *'\ntimezone = 'UTC'",
            "triggers[1].timezone",
            "unknown key",
        ),
        ("[worker]\nname = 'o'\n[vars]\ncurrency = 'EUR'", "vars.currency", "^[A-Z_]"),
        ("[worker]\nname = 'o'\n[vars]\nRATIO = nan", "vars.RATIO", "not a JSON document value"),
        (
            "[worker]\nname = 'o'\n[vars]\nWHEN = 2026-03-04T10:00:00Z",
            "vars.WHEN",
            "not a JSON document value",
        ),
        ("[worker]\nname = 'o'\n[vars]\nBIG = 9007199254740992", "vars.BIG", "not a JSON document value"),
        (
            "[worker]\nname = 'o'\n[vars]\nT = { inner = [1, inf] }",
            "vars.T.inner.1",
            "not a JSON document value",
        ),
    ],
)
def test_rejections_name_the_place(text: str, where: str, fragment: str) -> None:
    with pytest.raises(manifest.ManifestError) as caught:
        manifest.parse(text, source="x/takohost.toml")
    assert caught.value.where == where
    assert fragment in caught.value.message
    assert str(caught.value).startswith("x/takohost.toml: ")


@pytest.mark.parametrize(
    ("tail", "where", "fragment"),
    [
        ("[[workflows]]\nname = 'orders'\nclass = 'W'", "workflows[1].name", "worker.name"),
        ("[[workflows]]\nname = 'orders-deployment'\nclass = 'W'", "workflows[1].name", "Deployment"),
        (
            "[[workflows]]\nname = 'w'\nclass = 'W'\n[[triggers]]\nname = 'w'\ncron = '* * * * *'",
            "triggers[1].name",
            "workflows[1].name",
        ),
        (
            "[[workflows]]\nname = 'a'\nclass = 'A'\nbinding = 'B'\n[[workflows]]\nname = 'b'\nclass = 'B'\n"
            "binding = 'B'",
            "workflows[2].binding",
            "already used",
        ),
        (
            "[vars]\nORDERS = 1\n[[workflows]]\nname = 'a'\nclass = 'A'\nbinding = 'ORDERS'",
            "workflows[1].binding",
            "also a var",
        ),
    ],
)
def test_names_must_be_distinct(tail: str, where: str, fragment: str) -> None:
    with pytest.raises(manifest.ManifestError) as caught:
        manifest.parse("[worker]\nname = 'orders'\n" + tail)
    assert caught.value.where == where
    assert fragment in caught.value.message


def test_derived_names_stay_valid_for_the_longest_worker_name() -> None:
    longest = "a" * 50 + "-" + "b" * 12  # 63 characters
    m = manifest.parse(f"[worker]\nname = '{longest}'")
    digest = manifest.content_digest({"x": 1})
    for name in (m.deployment_name, m.version_name(digest)):
        assert len(name) <= 63
        assert identifiers.RESOURCE_NAME_RE.match(name), name
    assert m.version_name(digest).endswith("-" + digest[:12])
    # Trimming may end on '-': it is stripped so that the name stays valid.
    m2 = manifest.parse("[worker]\nname = '" + "a" * 49 + "-" + "b" * 13 + "'")
    assert identifiers.RESOURCE_NAME_RE.match(m2.deployment_name)


def test_content_digest_ignores_key_order_but_not_values() -> None:
    assert manifest.content_digest({"a": 1, "b": [1, 2]}) == manifest.content_digest({"b": [1, 2], "a": 1})
    assert manifest.content_digest({"a": 1}) != manifest.content_digest({"a": 2})
    assert manifest.content_digest({"a": "é"}) != manifest.content_digest({"a": "e"})


def _write(root: pathlib.Path, files: dict[str, str | bytes]) -> pathlib.Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def test_collect_modules_reads_relative_paths_and_skips_hidden_and_caches(tmp_path: pathlib.Path) -> None:
    _write(
        tmp_path,
        {
            "main.py": "import pkg.helpers\n",
            "pkg/__init__.py": "",
            "pkg/helpers.py": "X = 'é'\n",
            ".venv/lib/site.py": "ignored",
            "pkg/__pycache__/helpers.cpython-311.py": "ignored",
            "notes.txt": "not python",
            "takohost.toml": MINIMAL,
        },
    )
    assert manifest.collect_modules(tmp_path) == {
        "main.py": "import pkg.helpers\n",
        "pkg/__init__.py": "",
        "pkg/helpers.py": "X = 'é'\n",
    }


@pytest.mark.parametrize(
    ("files", "where", "fragment"),
    [
        ({}, "modules", "no .py files"),
        ({"my-mod.py": ""}, "my-mod.py", "module paths"),
        ({"2fast.py": ""}, "2fast.py", "module paths"),
        ({"main.py": b"\xff\xfe"}, "main.py", "not UTF-8"),
        ({"main.py": "#" * (manifest.MAX_MODULE_BYTES + 1)}, "main.py", "at most"),
        ({f"m{i}.py": "" for i in range(65)}, "modules", "at most 64"),
        ({f"m{i}.py": "#" * 900_000 for i in range(5)}, "modules", "bytes of code"),
    ],
)
def test_collect_modules_limits(tmp_path: pathlib.Path, files: dict, where: str, fragment: str) -> None:
    _write(tmp_path, files)
    with pytest.raises(manifest.ManifestError) as caught:
        manifest.collect_modules(tmp_path)
    assert caught.value.where == where
    assert fragment in caught.value.message


def test_load_project_needs_the_main_module(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, {"takohost.toml": MINIMAL, "app.py": ""})
    with pytest.raises(manifest.ManifestError) as caught:
        manifest.load_project(tmp_path)
    assert caught.value.where == "worker.main"
    assert "app.py" in caught.value.message


def test_load_reports_a_missing_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(manifest.ManifestError) as caught:
        manifest.load(tmp_path)
    assert "not found" in str(caught.value)


@pytest.mark.parametrize(
    ("example", "worker", "workflows", "triggers"),
    [
        ("orders", "orders", [("order-fulfilment", "OrderWorkflow", "ORDERS")], []),
        ("approvals", "approvals", [("approval-request", "ApprovalWorkflow", "APPROVALS")], []),
        (
            "nightly-report",
            "nightly-report",
            [("daily-report", "ReportWorkflow", "REPORTS")],
            [("nightly-report-schedule", "0 2 * * *")],
        ),
        ("rate-alert", "rates", [("rate-alert", "RateAlertWorkflow", None)], []),
    ],
)
def test_examples_are_valid_projects(example: str, worker: str, workflows: list, triggers: list) -> None:
    project = manifest.load_project(EXAMPLES / example)
    m = project.manifest
    assert m.worker == worker
    assert [(w.name, w.class_name, w.binding) for w in m.workflows] == workflows
    assert [(t.name, t.cron) for t in m.triggers] == triggers
    assert "main.py" in project.modules
    for decl in m.workflows:
        assert f"class {decl.class_name}:" in project.modules[m.main]
    if triggers:
        assert "def scheduled(event, env, ctx):" in project.modules[m.main]


def test_the_sdk_side_schema_leaves_the_cron_check_to_the_cli():
    """takohost.manifest (what the test kit reads) parses without the host's cron grammar, which
    lives host-side (core.cron); host_cli.manifest adds it."""
    from takohost import manifest as sdk_manifest

    text = "[worker]\nname = 'o'\n[[triggers]]\nname = 't'\ncron = '@daily'"
    assert sdk_manifest.parse(text).triggers == (sdk_manifest.TriggerDecl(name="t", cron="@daily"),)
    with pytest.raises(manifest.ManifestError, match="triggers\\[1\\].cron"):
        manifest.parse(text)
    checked = sdk_manifest.parse(text.replace("@daily", "0 6 * * *"), check_cron=manifest.check_cron)
    assert checked.triggers[0].cron == "0 6 * * *"
