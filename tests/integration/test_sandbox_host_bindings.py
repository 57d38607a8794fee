"""One binding surface for every sandbox path (docs/spec/worker-forms.md#wf-errors, docs/spec/durable-workflow.md#dw-binding, docs/spec/cron-trigger.md#cr-handler, docs/spec/host-limits.md#hl-decisions; ``workers.sandbox.jobs``).

The same probe code calls a workflow binding in ways the host refuses — an existing id, an unknown
instance, arguments only the host finds invalid (``invalid_request`` → ``TypeError``), params that
are not a document or are too large, an event for a terminal instance, a bound DurableWorkflow
that is gone — once from a workflow step's effect (a replay context) and once from a ``scheduled``
handler (a cron delivery). Both must see exactly the same error names. The probe bypasses the
child's own argument checks (``bindings._call``) so that the host's answer is what is tested.

Real Postgres (a database of this module's own), Redis, and real sandbox children; contexts and
deliveries run in the test process with the same code as the Celery tasks.
"""

from __future__ import annotations

import datetime as dt

from models import db as models_db
from models import resources as res_models
from services import instance_history, instances
from tests.integration.test_cron_support import at, create_stack, decide, deliveries_of
from tests.support import workflows
from workers import cron_tasks

PROBE = """
from takohost import errors
from takohost.runtime import bindings as _b


def _outcome(fn):
    try:
        fn()
        return "ok"
    except TypeError:
        return "TypeError"
    except errors.HostError as e:
        return e.name
    except Exception as e:
        return "other:" + type(e).__name__


def probe(env, prefix):
    peers, raw = env.PEERS, lambda call, **args: _b._call(env.PEERS._channel, binding="PEERS", call=call, args=args)
    out = {}
    out["create"] = _outcome(lambda: peers.create(id=prefix + "-1"))
    out["instance_exists"] = _outcome(lambda: peers.create(id=prefix + "-1"))
    out["unknown_instance"] = _outcome(lambda: peers.get(prefix + "-missing"))
    out["host_invalid_id"] = _outcome(lambda: raw("get", id=""))
    out["malformed_call"] = _outcome(lambda: raw("send_event", id=prefix + "-1"))
    out["invalid_params"] = _outcome(lambda: raw("create", id=prefix + "-2", params=[1, 2]))
    out["document_too_large"] = _outcome(lambda: raw("create", id=prefix + "-3", params={"a": "x" * 1100000}))
    done = peers.create(id=prefix + "-4")
    done.terminate()
    out["instance_terminal"] = _outcome(lambda: done.send_event(type="go"))
    out["bound_workflow_gone"] = _outcome(lambda: env.GONE.create())
    return out


class Prober:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        return step.do("probe", lambda: probe(self.env, event["instanceId"]))


def scheduled(event, env, ctx):
    import json
    out = probe(env, "cron")
    if out != env.EXPECTED:
        raise AssertionError(json.dumps(out, sort_keys=True))
"""

EXPECTED = {
    "create": "ok",
    "instance_exists": "instance_exists",
    "unknown_instance": "unknown_instance",
    "host_invalid_id": "TypeError",
    "malformed_call": "TypeError",
    "invalid_params": "invalid_params",
    "document_too_large": "document_too_large",
    "instance_terminal": "instance_terminal",
    "bound_workflow_gone": "backend_unavailable",
}

UNKNOWN_BINDING = """
from takohost.runtime import bindings as _b


def _forged(env):
    try:   # a binding name the Version does not declare: only a forged frame can ask for it
        _b._call(env.PEERS._channel, binding="NOPE", call="get", args={"id": "x"})
    except Exception as e:
        return type(e).__name__
    return "answered"


class Forger:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        return {"caught": _forged(self.env)}


def scheduled(event, env, ctx):
    _forged(env)   # swallowing the answer must not turn the protocol break into an ok run
"""

NAP = """
class Queue:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {}
"""


def _targets(db_url: str, space: str) -> dict[str, str]:
    """PEERS (a live DurableWorkflow) and GONE (a deleted one) for the probe's bindings."""
    peers = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    gone = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    with models_db.session_scope(db_url) as session:
        resource = session.get(res_models.Resource, gone.workflow)
        resource.deleted_at = resource.updated_at
    return {"PEERS": peers.workflow, "GONE": gone.workflow}


def _scheduled_run(db_url: str, *, space: str, source: str, bindings: dict[str, str], zygote, minute: str):
    """Deliver one match of a trigger whose Version is ``source`` with ``bindings``; returns
    ``(deliver's answer, [(outcome, error)] of the match's deliveries)``."""
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=source, now=at(minute) - dt.timedelta(seconds=30)
    )
    with models_db.session_scope(db_url) as session:
        version = session.get(res_models.Resource, stack.version_uid)
        version.spec = {
            **version.spec,
            "vars": {"EXPECTED": EXPECTED},
            "workflowBindings": [
                {"name": name, "resource": {"resourceUid": uid}} for name, uid in bindings.items()
            ],
        }
    [(match_pk, _)] = decide(
        db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid]
    )
    answer = cron_tasks.deliver(match_pk, zygote=zygote)
    return answer, [(d.outcome, d.error) for d in deliveries_of(db_url, match_pk)]


def test_a_workflow_step_sees_the_host_error_names_of_binding_calls(db_url, space_token, driver):
    space = space_token[0]
    d = workflows.deploy(
        db_url, space=space, source=PROBE, class_name="Prober", bindings=_targets(db_url, space)
    )
    instances.create(space=space, workflow_uid=d.workflow, instance_id="wf")
    assert driver.run()[0] == "complete"  # then the peers it created run (and sleep)
    assert instances.status(space=space, workflow_uid=d.workflow, instance_id="wf") == {
        "status": "complete",
        "output": EXPECTED,
    }


def test_a_scheduled_handler_sees_the_same_error_names_as_a_workflow(db_url, space_token, zygote, captured):
    # Before the shared sandbox host, cron answered invalid_request as backend_unavailable.
    space = space_token[0]
    answer, runs = _scheduled_run(
        db_url,
        space=space,
        source=PROBE,
        bindings=_targets(db_url, space),
        zygote=zygote,
        minute="2030-05-06T10:05:00Z",
    )
    assert runs == [("ok", None)] and answer == "ok"


def test_an_undeclared_binding_is_a_protocol_break_on_both_paths(
    db_url, space_token, driver, zygote, captured
):
    space = space_token[0]
    peers = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    d = workflows.deploy(
        db_url, space=space, source=UNKNOWN_BINDING, class_name="Forger", bindings={"PEERS": peers.workflow}
    )
    instances.create(space=space, workflow_uid=d.workflow, instance_id="forger")
    assert driver.run() == ["errored"]
    status = instances.status(space=space, workflow_uid=d.workflow, instance_id="forger")
    assert status["status"] == "errored" and status["error"]["reason"] == "run_threw"
    assert "broke the host protocol: unknown binding 'NOPE'" in status["error"]["message"]
    events = instance_history.history(space=space, workflow_uid=d.workflow, instance_id="forger").events
    assert events[-1]["eventType"] == "InstanceErrored"

    # The handler swallows whatever it is answered; before the shared host it was answered
    # backend_unavailable and the run counted as ok.
    answer, runs = _scheduled_run(
        db_url,
        space=space,
        source=UNKNOWN_BINDING,
        bindings={"PEERS": peers.workflow},
        zygote=zygote,
        minute="2030-05-06T10:10:00Z",
    )
    assert answer == "failed"
    [(outcome, error)] = runs
    assert outcome == "failed" and "broke the protocol: unknown binding 'NOPE'" in error
