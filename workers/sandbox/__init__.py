"""The parent's side of every tenant run in the sandbox — replay contexts
(``workers.engine.context``), cron deliveries (``workers.cron_tasks``), Version validation and
replay checks (``workers.version_check``) — in one package:

* :mod:`~workers.sandbox.zygote`: the zygote client (``Zygote``, ``get_zygote``);
* :mod:`~workers.sandbox.child`: one child (``ChildHandle``: frames, pings, and
  ``kill_and_wait``, the one stop proof);
* :mod:`~workers.sandbox.children`: the warm pre-spawned child of replay contexts;
* :mod:`~workers.sandbox.jobs`: the Version pick, the job frame and the binding answers;
* :mod:`~workers.sandbox.lease`: the Redis leases (and fair-share slots) of contexts and deliveries;
* :mod:`~workers.sandbox.heartbeat`: the one per-process heartbeat that renews those leases,
  pings the children and notices fencing;
* :mod:`~workers.sandbox.receive`: the one loop that waits for a child's next frame (log
  capture, egress records, deadlines);
* :mod:`~workers.sandbox.session`: one run's hold on all of it (``Session``: its lease kept
  alive, its child, pings, log capture and stop proof);
* :mod:`~workers.sandbox.validation`: WorkerVersion validation.

The zygote client and the child handle are re-exported here (``sandbox.Zygote``,
``sandbox.ChildHandle``, ...): they are what callers hold.
"""

from workers.sandbox.child import ChildGone, ChildHandle
from workers.sandbox.zygote import Zygote, ZygoteUnavailable, get_zygote

__all__ = ["ChildGone", "ChildHandle", "Zygote", "ZygoteUnavailable", "get_zygote"]
