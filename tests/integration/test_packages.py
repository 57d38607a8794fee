"""WorkerVersion requirements installed by the host (docs/spec/worker-forms.md#wf-version; docs/spec/host-features.md#hf-real-work;
docs/packages.md): wheels built in the test into a local wheelhouse, pip as the resolver, the
real sandbox importing against the layer. No registry, no internet.
"""

from __future__ import annotations

import datetime as dt
import os
import stat

import pytest
import sqlalchemy as sa

from tests.integration.test_resources_support import create_ok, headers, post, settle, version_spec
from tests.support import wheels, workflows

pytestmark = pytest.mark.usefixtures("no_dispatch")

GREET = "tako_greet/__init__.py"


@pytest.fixture()
def wheelhouse(tmp_path, monkeypatch):
    """A wheelhouse of this test: tako-greet 1.0 and 2.0, tako-app 1.0 (needs tako-greet==2.0),
    a wheel for another platform, an sdist whose setup.py would leave ``../sdist-ran`` if it ever ran."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheels.build_wheel(house, name="tako-greet", version="1.0", files={GREET: "WORD = 'one'\n"})
    wheels.build_wheel(house, name="tako-greet", version="2.0", files={GREET: "WORD = 'two'\n"})
    wheels.build_wheel(
        house,
        name="tako-app",
        version="1.0",
        files={"tako_app/__init__.py": "import tako_greet\nWORD = 'app-' + tako_greet.WORD\n"},
        requires=("tako-greet==2.0",),
    )
    wheels.build_wheel(
        house,
        name="tako-native",
        version="1.0",
        files={"tako_native/__init__.py": ""},
        tag="cp39-cp39-win_amd64",
    )
    marker = tmp_path / "sdist-ran"
    wheels.build_sdist(
        house,
        name="tako-sdist",
        version="1.0",
        setup_py=f"open({str(marker)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup()\n",
    )
    monkeypatch.setenv("TAKOHOST_WHEELHOUSE", str(house))
    return house


@pytest.fixture()
def own_package_dir(tmp_path, monkeypatch) -> str:
    """A package directory of this test alone (other test processes install into the run's at
    the same time), for tests that never import in the sandbox (it mounts the run's)."""
    path = str(tmp_path / "packages")
    monkeypatch.setenv("TAKOHOST_PACKAGE_DIR", path)
    return path


def _layers_state() -> tuple[set[str], set[str]]:
    """(index entries, staging entries other than lock files) of this run's package directory."""
    root = os.environ["TAKOHOST_PACKAGE_DIR"]
    index = (
        set(os.listdir(os.path.join(root, "index"))) if os.path.isdir(os.path.join(root, "index")) else set()
    )
    staging = os.path.join(root, "staging")
    staged = {n for n in os.listdir(staging) if not n.endswith(".lock")} if os.path.isdir(staging) else set()
    return index, staged


def _install(pins_list: list[str]):
    from takohost.domain import requirements as pins
    from workers.packages import installer

    return installer.install(pins.parse_requirements(pins_list))


def test_a_wheel_with_its_dependency_becomes_one_read_only_precompiled_shared_layer(
    wheelhouse, own_package_dir
) -> None:
    layer = _install(["tako-app==1.0"])
    assert sorted((p["name"], p["version"]) for p in layer.packages) == [
        ("tako-app", "1.0"),
        ("tako-greet", "2.0"),
    ]
    assert all(len(p["sha256"]) == 64 for p in layer.packages)
    assert os.path.isfile(os.path.join(layer.path, GREET))
    pycs = os.listdir(os.path.join(layer.path, "tako_greet", "__pycache__"))
    assert any(name.endswith(".pyc") for name in pycs)
    for parent, dirs, files in os.walk(layer.path):
        for name in dirs + files:
            assert not os.stat(os.path.join(parent, name)).st_mode & (
                stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
            )
    assert stat.S_IMODE(os.stat(os.path.dirname(layer.path)).st_mode) == 0o311
    # The same set, spelled and ordered otherwise, is the same layer: not installed again.
    again = _install(["Tako_App==1.0"])
    assert (again.key, again.path, again.size_bytes) == (layer.key, layer.path, layer.size_bytes)
    assert layer.size_bytes > 0


@pytest.mark.parametrize(
    ("pins_list", "code", "package", "fragment"),
    [
        (["tako-sdist==1.0"], "sdist_only", "tako-sdist", "only a source distribution"),
        (["tako-nope==1.0"], "package_not_found", "tako-nope", "no such package"),
        (["tako-greet==3.0"], "package_not_found", "tako-greet", "no such version"),
        (["tako-native==1.0"], "no_wheel_for_platform", "tako-native", "no wheel"),
        (["tako-app==1.0", "tako-greet==1.0"], "conflict", "tako-app", "tako-greet"),
        ([f"tako-greet==1.0 --hash=sha256:{'a' * 64}"], "hash_mismatch", "tako-greet", "SHA-256"),
    ],
)
def test_pins_that_cannot_install_fail_with_a_code_naming_the_package_and_leave_nothing(
    wheelhouse, own_package_dir, pins_list: list[str], code: str, package: str, fragment: str
) -> None:
    from workers.packages import resolve

    before = _layers_state()
    with pytest.raises(resolve.PackageError) as info:
        _install(pins_list)
    assert (info.value.code, info.value.package) == (code, package)
    assert fragment in info.value.message and package in info.value.message
    assert _layers_state() == before
    assert not (wheelhouse.parent / "sdist-ran").exists()  # the sdist's build code never ran


def test_a_layer_over_the_size_quota_is_refused(wheelhouse, own_package_dir, monkeypatch) -> None:
    from workers.packages import resolve

    monkeypatch.setenv("TAKOHOST_PACKAGE_LAYER_MAX_BYTES", "100")
    before = _layers_state()
    with pytest.raises(resolve.PackageError) as info:
        _install(["tako-greet==2.0"])
    assert info.value.code == "layer_too_large"
    assert "TAKOHOST_PACKAGE_LAYER_MAX_BYTES" in info.value.message and "tako-greet" in info.value.message
    assert _layers_state() == before


def _spec(worker: str, requirements: list[str], main: str) -> dict:
    return version_spec(worker, main, requirements=requirements)


SEES = (
    "import tako_greet\n"
    "exec(f'class Saw_{tako_greet.WORD}:\\n    def __init__(self, env): pass\\n    def run(self, e, s): return 1\\n')\n"
)


def test_two_versions_pinned_to_different_versions_of_a_package_each_see_their_own(
    wheelhouse, client, space_token, db_url
) -> None:
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    one = create_ok(client, space, token, "WorkerVersion", _spec(worker, ["tako-greet==1.0"], SEES))
    two = create_ok(client, space, token, "WorkerVersion", _spec(worker, ["tako-greet==2.0"], SEES))
    observed = {
        uid: client.get(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token, None)).get_json()[
            "observed"
        ]
        for uid in (one, two)
    }
    assert observed[one]["workflowClasses"] == ["Saw_one"]
    assert observed[two]["workflowClasses"] == ["Saw_two"]
    # Without requirements the package is not importable: nothing of the host's leaks in.
    response = post(client, space, token, "WorkerVersion", version_spec(worker, SEES))
    failed = settle(response.get_json()["id"])
    assert failed["error"]["code"] == "validation_failed"
    assert "No module named 'tako_greet'" in failed["error"]["message"]

    from services import packages as package_records

    used = package_records.space_layer_bytes(space)
    assert used == sum(_install([pin]).size_bytes for pin in ("tako-greet==1.0", "tako-greet==2.0"))
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT version_uid, space FROM version_packages WHERE space = :s ORDER BY version_uid"),
            {"s": space},
        ).all()
    engine.dispose()
    assert sorted(r[0] for r in rows) == sorted([one, two])


def test_a_version_whose_pins_cannot_install_fails_with_the_code_and_changes_nothing(
    wheelhouse, own_package_dir, client, space_token, db_url
) -> None:
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    before = _layers_state()
    response = post(
        client, space, token, "WorkerVersion", _spec(worker, ["tako-sdist==1.0"], "import tako_sdist\n")
    )
    op = settle(response.get_json()["id"])
    assert op["state"] == "failed" and op["effect"] == "partial"
    assert op["error"]["code"] == "sdist_only"
    assert op["error"]["details"] == {"package": "tako-sdist"}
    assert "tako-sdist" in op["error"]["message"]
    version = client.get(
        f"/v2/spaces/{space}/resources/{op['resourceUid']}", headers=headers(token, None)
    ).get_json()
    assert version["phase"] == "failed" and version["observed"]["validated"] is False
    assert _layers_state() == before
    assert not (wheelhouse.parent / "sdist-ran").exists()
    from services import packages as package_records

    assert package_records.space_layer_bytes(space) == 0


def test_the_sweep_removes_a_layer_an_hour_after_its_last_version_is_deleted(
    wheelhouse, client, space_token, db_url
) -> None:
    from models.base import utcnow
    from workers.packages import sweep

    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    wheels.build_wheel(wheelhouse, name="tako-swept", version="1.0", files={"tako_swept.py": "X = 1\n"})
    pins_list = ["tako-swept==1.0"]  # a layer no other test uses
    version = create_ok(
        client, space, token, "WorkerVersion", _spec(worker, pins_list, "import tako_swept\n")
    )
    layer = _install(pins_list)
    now = utcnow()
    sweep.sweep(now=now, force=True)
    assert os.path.isdir(layer.path)  # in use
    op = client.delete(f"/v2/spaces/{space}/resources/{version}", headers=headers(token)).get_json()
    assert settle(op["id"])["state"] == "succeeded"
    sweep.sweep(now=now, force=True)  # unused from now on, kept for the grace period
    assert os.path.isdir(layer.path)
    sweep.sweep(now=now + dt.timedelta(minutes=59), force=True)
    assert os.path.isdir(layer.path)
    sweep.sweep(now=now + dt.timedelta(minutes=61), force=True)
    assert not os.path.exists(layer.path)
    assert layer.path.rsplit("/", 1)[1] not in _layers_state()[0]


def test_the_sweep_cleans_what_a_crashed_install_left_in_staging(own_package_dir) -> None:
    import time

    from models.base import utcnow
    from workers.packages import layers, sweep

    layers.prepare(own_package_dir)
    staging = layers.staging_dir(own_package_dir)
    old_dir, old_lock = os.path.join(staging, "install-crashed"), os.path.join(staging, "f" * 64 + ".lock")
    new_dir = os.path.join(staging, "install-running")
    for path in (old_dir, new_dir):
        os.makedirs(os.path.join(path, "layer", "pkg"))
        os.chmod(os.path.join(path, "layer", "pkg"), 0o555)
    open(old_lock, "w").close()
    two_hours_ago = time.time() - 7200
    for path in (old_dir, old_lock):
        os.utime(path, (two_hours_ago, two_hours_ago))
    sweep.sweep(now=utcnow(), force=True)
    assert sorted(os.listdir(staging)) == ["install-running"]


def test_a_context_on_a_machine_without_the_layer_installs_it_and_imports_it(
    wheelhouse, driver, space, db_url
):
    """A Version validated elsewhere (its layer is not on this machine): the context installs it
    on first use and its step runs with the package (``jobs.packages_name``)."""
    from models import db as models_db
    from models import resources as res_models
    from services import instances
    from workers.packages import config, layers
    from workers.sandbox import jobs

    wheels.build_wheel(wheelhouse, name="tako-late", version="1.0", files={"tako_late.py": "WORD = 'late'\n"})
    source = (
        "import tako_late\n"
        "class LateWorkflow:\n"
        "    def __init__(self, env): pass\n"
        "    def run(self, event, step):\n"
        "        return step.do('read', lambda: {'word': tako_late.WORD})\n"
    )
    deployed = workflows.deploy(db_url, space=space, source=source, class_name="LateWorkflow")
    with models_db.session_scope(db_url) as session:
        version = session.get(res_models.Resource, deployed.version)
        version.spec = {**version.spec, "requirements": ["tako-late==1.0"]}
    layer = _install(["tako-late==1.0"])
    layers.remove(config.current().package_dir, layer.key)  # "another machine" validated it
    jobs._packages.clear()
    assert not os.path.exists(layer.path)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="late-1", now=driver.clock())
    driver.run()
    status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id="late-1")
    assert status["status"] == "complete", status
    assert status["output"] == {"word": "late"}
    assert os.path.isdir(layer.path)


def test_a_version_whose_new_layer_would_pass_the_spaces_layer_quota_fails_and_a_shared_one_does_not(
    wheelhouse, client, space_token, monkeypatch
) -> None:
    """The layer-bytes quota (docs/spec/host-features.md#hf-neighbours) counts the distinct layers a Space's live Versions
    use: a second Version with the same pins adds nothing; one that needs a new layer over the
    quota fails its Operation with ``quota_exceeded`` and is never validated."""
    space, token = space_token
    one = _install(["tako-greet==1.0"]).size_bytes
    monkeypatch.setenv("TAKOHOST_QUOTA_LAYER_BYTES", str(one))
    worker = create_ok(client, space, token, "ModuleWorker", {})
    create_ok(client, space, token, "WorkerVersion", _spec(worker, ["tako-greet==1.0"], SEES))
    create_ok(client, space, token, "WorkerVersion", _spec(worker, ["tako-greet==1.0"], SEES + "\n"))
    response = post(client, space, token, "WorkerVersion", _spec(worker, ["tako-greet==2.0"], SEES))
    op = settle(response.get_json()["id"])
    assert op["state"] == "failed"
    assert op["error"]["code"] == "quota_exceeded"
    assert op["error"]["details"] == {"quota": "layerBytes", "current": one, "limit": one}
    version = client.get(
        f"/v2/spaces/{space}/resources/{op['resourceUid']}", headers=headers(token, None)
    ).get_json()
    assert version["phase"] == "failed" and "workflowClasses" not in version["observed"]
    from services import packages as package_records

    assert package_records.space_layer_bytes(space) == one


def test_a_cron_delivery_imports_its_versions_packages(wheelhouse, space, db_url) -> None:
    """The ``scheduled`` handler of a Version with requirements finds its layer too (the same job
    builder as replay contexts, ``jobs.job_message``)."""
    from models import db as models_db
    from models import resources as res_models
    from tests.integration.test_cron_support import at, create_stack, decide, deliveries_of
    from workers import cron_tasks

    wheels.build_wheel(wheelhouse, name="tako-cron", version="1.0", files={"tako_cron.py": "READY = True\n"})
    handler = "import tako_cron\n\ndef scheduled(event, env, ctx):\n    assert tako_cron.READY\n"
    minute = "2030-03-04T10:05:00Z"
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=handler, now=at(minute) - dt.timedelta(seconds=30)
    )
    with models_db.session_scope(db_url) as session:
        version = session.get(res_models.Resource, stack.version_uid)
        version.spec = {**version.spec, "requirements": ["tako-cron==1.0"]}
    _install(["tako-cron==1.0"])
    recorded = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert cron_tasks.deliver(recorded[0][0]) == "ok"
    assert [(d.outcome, d.error) for d in deliveries_of(db_url, recorded[0][0])] == [("ok", None)]
