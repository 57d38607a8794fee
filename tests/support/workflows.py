"""Deploy workflow code for engine tests, and drive replay contexts in-process.

* :func:`deploy` inserts a ModuleWorker, a validated WorkerVersion, a WorkerDeployment and a
  DurableWorkflow directly into the test database, in the shapes docs/spec/worker-forms.md gives (Version
  ``observed = {"validated": true, "workflowClasses": [...], "handlers": [...]}``), so engine tests
  do not depend on the Operation reconciler; :func:`deploy_http` does the same through the real
  resources API (used by the end-to-end tests).
* :class:`Driver` replaces ``services.dispatch.run_context`` with a queue and runs the dispatched
  contexts in the test process (same engine code as the Celery task), with a controllable clock,
  so step semantics are tested deterministically; ``fire_timers``/``sweep`` play the beat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import textwrap
import time
import uuid
from collections.abc import Callable

import requests
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from models import resources as res_models
from models.base import utcnow

FORM = "https://edge.forms.takoform.com/forms/{}/"
FORM_VERSIONS = {
    "ModuleWorker": "0.3.0",
    "WorkerVersion": "0.5.0",
    "WorkerDeployment": "0.4.0",
    "DurableWorkflow": "0.3.0",
}


@dataclasses.dataclass(frozen=True)
class Deployed:
    """UIDs of a deployed workflow: ``workflow`` is the DurableWorkflow instances are created on."""

    space: str
    worker: str
    version: str
    deployment: str
    workflow: str


def _resource(
    session, *, space: str, form: str, spec: dict, worker_uid: str | None, observed: dict | None = None
) -> str:
    uid = str(uuid.uuid4())
    now = utcnow()
    session.add(
        res_models.Resource(
            uid=uid,
            space=space,
            form=form,
            name=f"{form.lower()[:8]}-{uid[:8]}",
            generation=1,
            spec=spec,
            private_inputs=None,
            observed=observed or {},
            observed_at=now if observed else None,
            output={},
            phase="idle",
            worker_uid=worker_uid,
            latest_operation_id=None,
            created_at=now,
            updated_at=now,
            deleted_at=None,
        )
    )
    return uid


def version_spec(
    *,
    worker: str,
    source: str,
    extra_modules: dict[str, str] | None = None,
    variables: dict | None = None,
    bindings: dict[str, str] | None = None,
) -> dict:
    """A WorkerVersion spec with ``main.py`` = ``source`` (dedented)."""
    modules = {"main.py": textwrap.dedent(source), **(extra_modules or {})}
    return {
        "worker": {"resourceUid": worker},
        "mainModule": "main.py",
        "modules": modules,
        "vars": variables or {},
        "workflowBindings": [
            {"name": name, "resource": {"resourceUid": uid}} for name, uid in (bindings or {}).items()
        ],
    }


def add_version(
    db_url: str,
    *,
    space: str,
    worker: str,
    source: str,
    class_names: list[str],
    extra_modules: dict[str, str] | None = None,
    variables: dict | None = None,
    bindings: dict[str, str] | None = None,
) -> str:
    """Insert a validated WorkerVersion of ``worker``; returns its uid."""
    spec = version_spec(
        worker=worker, source=source, extra_modules=extra_modules, variables=variables, bindings=bindings
    )
    with models_db.session_scope(db_url) as session:
        return _resource(
            session,
            space=space,
            form="WorkerVersion",
            spec=spec,
            worker_uid=worker,
            observed={"validated": True, "workflowClasses": class_names, "handlers": []},
        )


def set_deployment(db_url: str, *, deployment: str, versions: dict[str, int]) -> None:
    """Replace a Deployment's allocation: ``{version uid: weight}`` (an allocation update)."""
    with models_db.session_scope(db_url) as session:
        resource = session.get(res_models.Resource, deployment)
        spec = dict(resource.spec)
        spec["versions"] = [{"version": {"resourceUid": uid}, "weight": w} for uid, w in versions.items()]
        resource.spec = spec
        resource.observed = {"versions": spec["versions"]}  # applied, as its Operation would
        resource.generation += 1


def deploy(
    db_url: str,
    *,
    space: str,
    source: str,
    class_name: str,
    extra_modules: dict[str, str] | None = None,
    variables: dict | None = None,
    bindings: dict[str, str] | None = None,
    self_binding: str | None = None,
) -> Deployed:
    """Insert Worker + validated Version + Deployment (100 %) + DurableWorkflow for ``class_name``.

    ``bindings`` maps binding names to DurableWorkflow uids; ``self_binding`` adds a binding of
    that name to the workflow being deployed.
    """
    with models_db.session_scope(db_url) as session:
        worker = _resource(session, space=space, form="ModuleWorker", spec={}, worker_uid=None)
        workflow = _resource(
            session,
            space=space,
            form="DurableWorkflow",
            spec={"worker": {"resourceUid": worker}, "className": class_name},
            worker_uid=worker,
        )
    all_bindings = dict(bindings or {})
    if self_binding:
        all_bindings[self_binding] = workflow
    version = add_version(
        db_url,
        space=space,
        worker=worker,
        source=source,
        class_names=[class_name],
        extra_modules=extra_modules,
        variables=variables,
        bindings=all_bindings,
    )
    with models_db.session_scope(db_url) as session:
        deployment = _resource(
            session,
            space=space,
            form="WorkerDeployment",
            worker_uid=worker,
            spec={
                "worker": {"resourceUid": worker},
                "versions": [{"version": {"resourceUid": version}, "weight": 100}],
            },
            # applied, as its Operation would: the workflow is ready (accepts instances)
            observed={"versions": [{"version": {"resourceUid": version}, "weight": 100}]},
        )
    return Deployed(space=space, worker=worker, version=version, deployment=deployment, workflow=workflow)


# --------------------------------------------------------------------------------------------
# through the real resources API


def _wait_operation(
    session: requests.Session, base: str, space: str, op: dict, timeout: float = 60.0
) -> dict:
    deadline = time.monotonic() + timeout
    while op["state"] in ("pending", "running"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Operation did not finish: {op}")
        time.sleep(0.1)
        op = session.get(f"{base}/v2/spaces/{space}/operations/{op['id']}").json()
    if op["state"] != "succeeded":
        raise AssertionError(f"Operation failed: {op}")
    return op


def _create_http(session: requests.Session, base: str, space: str, form: str, spec: dict) -> str:
    body = {
        "form": FORM.format(f"{form}/{FORM_VERSIONS[form]}"),
        "name": f"r{uuid.uuid4().hex[:12]}",
        "spec": spec,
    }
    response = session.post(
        f"{base}/v2/spaces/{space}/resources", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
    )
    assert response.status_code == 202, response.text
    return _wait_operation(session, base, space, response.json())["resourceUid"]


def deploy_http(
    base: str,
    token: str,
    space: str,
    *,
    source: str,
    class_name: str,
    variables: dict | None = None,
    self_binding: str | None = None,
    requirements: list[str] | None = None,
) -> Deployed:
    """Deploy through the HTTP API (needs a real API server and worker): Worker → DurableWorkflow
    (allowed before a Deployment) → Version (validated by the worker; with ``requirements``, its
    pinned packages) → Deployment."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    worker = _create_http(session, base, space, "ModuleWorker", {})
    workflow = _create_http(
        session, base, space, "DurableWorkflow", {"worker": {"resourceUid": worker}, "className": class_name}
    )
    spec = version_spec(
        worker=worker,
        source=source,
        variables=variables,
        bindings={self_binding: workflow} if self_binding else None,
    )
    if requirements:
        spec["requirements"] = list(requirements)
    version = _create_http(session, base, space, "WorkerVersion", spec)
    deployment = _create_http(
        session,
        base,
        space,
        "WorkerDeployment",
        {
            "worker": {"resourceUid": worker},
            "versions": [{"version": {"resourceUid": version}, "weight": 100}],
        },
    )
    return Deployed(space=space, worker=worker, version=version, deployment=deployment, workflow=workflow)


# --------------------------------------------------------------------------------------------
# in-process driving


class Clock:
    """A controllable aware-UTC clock: starts at the real now, moves only when told."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.now = start or utcnow()

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


class Driver:
    """Run replay contexts in the test process: dispatches are queued, :meth:`run` drains them.

    ``outcomes`` records every context's outcome word. ``clock`` is used by contexts, timers and
    service calls made through the driver.
    """

    def __init__(self, monkeypatch, *, zygote, clock: Clock | None = None, settings=None) -> None:
        from core import config
        from services import dispatch

        self.queue: list[int] = []
        self.outcomes: list[tuple[int, str]] = []
        self.zygote = zygote
        self.clock = clock or Clock()
        self.settings = settings or config.load_settings()
        monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: self.queue.append(pk))
        monkeypatch.setattr(dispatch, "run_contexts", lambda pks: self.queue.extend(pks) or len(pks))

    def run(self, *, limit: int = 2000) -> list[str]:
        """Run queued contexts until none is left; returns their outcomes in order."""
        from workers.engine import context

        done = []
        for _ in range(limit):
            if not self.queue:
                return done
            pk = self.queue.pop(0)
            outcome = context.run_context(pk, settings=self.settings, zygote=self.zygote, clock=self.clock)
            self.outcomes.append((pk, outcome))
            done.append(outcome)
        raise AssertionError(f"still dispatching after {limit} contexts: {self.outcomes[-10:]}")

    def fire_timers(self) -> int:
        """Fire the timers due at the clock's now (beat's duty) and queue their contexts."""
        from workers.engine import timers

        return timers.fire_due(now=self.clock())

    def advance(self, seconds: float) -> list[str]:
        """Move the clock, fire due timers, run what they dispatched."""
        self.clock.advance(seconds)
        self.fire_timers()
        return self.run()


def instance_row(db_url: str, *, workflow: str, instance_id: str) -> inst_models.Instance:
    """The instance row (detached) for assertions."""
    with models_db.session_scope(db_url) as session:
        return session.scalar(
            sa.select(inst_models.Instance).where(
                inst_models.Instance.workflow_uid == workflow, inst_models.Instance.instance_id == instance_id
            )
        )


def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
) -> object:
    """Poll ``predicate`` until it returns something truthy (returned) or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def start_zygote():
    """A started sandbox zygote (caller stops it)."""
    from workers import sandbox

    zygote = sandbox.Zygote()
    zygote.start()
    return zygote


#: ``(TAKOHOST_DATABASE_URL, TAKOHOST_NAMESPACE)`` of the :func:`isolated_database` blocks open in
#: this process, innermost last: what the environment must name while they run (tests/conftest.py
#: checks it before every test).
ACTIVE_DATABASES: list[tuple[str, str]] = []


def check_none_open(module: str) -> None:
    """Raise ``RuntimeError`` if an :func:`isolated_database` block is still open as test module
    ``module`` (a nodeid path) starts: a fixture wider than a module opened it, and the environment
    would name that database for every later module of this process, which then writes rows into
    the session's database and reads them from that one (tests/conftest.py calls it)."""
    if ACTIVE_DATABASES:
        raise RuntimeError(
            f"{module} starts while isolated database(s) {[url for url, _ in ACTIVE_DATABASES]} are still "
            "open: a session- or package-scoped fixture opened one (give it scope='module')"
        )


@contextlib.contextmanager
def isolated_database():
    """A fresh database (a copy of the run's migrated template) that ``TAKOHOST_DATABASE_URL``
    points at while the block runs, and a Redis namespace of its own in ``TAKOHOST_NAMESPACE``;
    yields the database URL, and drops the database and the namespace's keys after.

    In-process engine tests use it so that real worker/beat processes started by other tests of
    the session (which poll the session database) never race the in-process driver. The namespace
    follows the database: instance pks start at 1 in every copy, so two modules running at once
    in two xdist processes would otherwise share the Redis keys of their leases (one context
    finding the other's instance "busy"), stop hints and Space counters. Celery's queues are named
    when ``services.celery_app`` is imported, so in-process dispatches still go to the session's.
    """
    import os

    import redis

    from core import config
    from tests.support import servers

    name = f"takohost_eng_{uuid.uuid4().hex[:10]}"
    url = servers.create_database(name)
    previous = {key: os.environ.get(key) for key in ("TAKOHOST_DATABASE_URL", "TAKOHOST_NAMESPACE")}
    namespace = f"{config.load_settings().namespace}-{name[-10:]}"
    try:
        os.environ["TAKOHOST_DATABASE_URL"] = url
        os.environ["TAKOHOST_NAMESPACE"] = namespace
        ACTIVE_DATABASES.append((url, namespace))
        yield url
    finally:
        if (url, namespace) in ACTIVE_DATABASES:
            ACTIVE_DATABASES.remove((url, namespace))
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        engine = models_db._engines.pop((os.getpid(), url), None)
        if engine is not None:
            engine.dispose()
        servers.drop_database(name)
        client = redis.Redis.from_url(config.load_settings().redis_url)
        try:
            keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


def clear_timers(db_url: str) -> None:
    """Delete every timer (test isolation: leftovers of one test never fire in the next)."""
    with models_db.session_scope(db_url) as session:
        session.execute(sa.delete(inst_models.Timer))


# --------------------------------------------------------------------------------------------
# a private stack of real processes (own database and Redis namespace) for destructive tests


class HttpInstances:
    """Instances over a real HTTP server, with ids sent byte-exact (``http.client``, no URL
    normalisation: ``requests`` would turn ``%2E`` back into a dot segment)."""

    def __init__(self, base: str, token: str, space: str, workflow: str) -> None:
        import urllib.parse

        parsed = urllib.parse.urlsplit(base)
        self.host, self.port = parsed.hostname, parsed.port
        self.token = token
        self.prefix = f"/v2/spaces/{space}/resources/{workflow}/instances"

    @staticmethod
    def enc(instance_id: str) -> str:
        """One path segment: every reserved character and every dot percent-encoded."""
        import urllib.parse

        return urllib.parse.quote(instance_id, safe="").replace(".", "%2E")

    def call(
        self,
        method: str,
        path: str = "",
        body: object = None,
        headers: dict | None = None,
        timeout: float = 60.0,
    ) -> tuple[int, object]:
        """Send one request; returns ``(status, parsed JSON body)``."""
        import http.client
        import json

        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
            if data is not None:
                all_headers["Content-Type"] = "application/json"
            conn.request(method, self.prefix + path, body=data, headers=all_headers)
            response = conn.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def status(self, instance_id: str) -> dict:
        """``GET …/instances/{id}`` body (asserting 200)."""
        code, body = self.call("GET", "/" + self.enc(instance_id))
        assert code == 200, body
        return body  # type: ignore[return-value]


@dataclasses.dataclass
class Stack:
    """Real API/worker/beat processes on a private database and namespace."""

    db_url: str
    namespace: str
    env: dict
    space: str
    token: str
    processes: list
    api_url: str | None = None

    def start_worker(self, *, concurrency: int = 1, pool: str = "prefork", wait: bool = True):
        """Start one more ``takohost worker`` (Celery pool ``pool``) on this stack (``wait=False``:
        ``processes.wait_ready`` it later)."""
        from tests.support import processes

        process = processes.start_worker(concurrency=concurrency, pool=pool, env=self.env, wait=wait)
        self.processes.append(process)
        return process

    def start_beat(self, *, wait: bool = True):
        """Start a ``takohost beat`` on this stack."""
        from tests.support import processes

        process = processes.start_beat(env=self.env, wait=wait)
        self.processes.append(process)
        return process

    def instances(self, workflow: str) -> HttpInstances:
        """HTTP access to the instances of ``workflow`` through this stack's API."""
        assert self.api_url is not None
        return HttpInstances(self.api_url, self.token, self.space, workflow)

    def redis_keys(self) -> list[bytes]:
        """Every Redis key of this stack's namespace."""
        import redis

        from core import config

        client = redis.Redis.from_url(config.load_settings().redis_url)
        return list(client.scan_iter(match=f"{self.namespace}:*", count=1000))

    def flush_redis(self) -> int:
        """Delete every key of this stack's namespace (leases, broker queue, unacked messages)."""
        import redis

        from core import config

        client = redis.Redis.from_url(config.load_settings().redis_url)
        keys = self.redis_keys()
        if keys:
            client.delete(*keys)
        return len(keys)


@contextlib.contextmanager
def private_stack(
    *,
    workers: int = 1,
    beat: bool = True,
    api: bool = True,
    lease_ttl_ms: int = 3000,
    extra_env: dict | None = None,
    worker_pool: str = "prefork",
    worker_concurrency: int = 1,
):
    """Yield a :class:`Stack`: a fresh database and Redis
    namespace, an API server, ``workers`` workers (``worker_pool``, ``worker_concurrency`` each)
    and a beat, all real processes, started side by side; everything is torn down after."""
    from services import tokens
    from tests.support import processes

    namespace = f"tke{uuid.uuid4().hex[:10]}"
    with isolated_database() as url:
        env = {
            "TAKOHOST_DATABASE_URL": url,
            "TAKOHOST_NAMESPACE": namespace,
            "TAKOHOST_LEASE_TTL_MS": str(lease_ttl_ms),
            "TAKOHOST_SWEEP_INTERVAL_S": "1",
            **(extra_env or {}),
        }
        space = f"s{uuid.uuid4().hex[:12]}"
        with models_db.session_scope(url) as session:
            token = tokens.create_token_txn(session, space=space)
        stack = Stack(db_url=url, namespace=namespace, env=env, space=space, token=token, processes=[])
        try:
            # Side by side: each takes seconds of imports, most of it waiting on the other core.
            if api:
                server = processes.start_api(env=env, wait=False)
                stack.processes.append(server)
                stack.api_url = server.extra["url"]
            for _ in range(workers):
                stack.start_worker(pool=worker_pool, concurrency=worker_concurrency, wait=False)
            if beat:
                stack.start_beat(wait=False)
            for process in stack.processes:
                processes.wait_ready(process)
            yield stack
        finally:
            processes.stop_all(stack.processes)
            try:
                stack.flush_redis()
            except Exception:  # noqa: BLE001 - best effort
                pass
            models_db.dispose_all()
