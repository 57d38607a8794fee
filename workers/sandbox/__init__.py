"""The parent's side of a tenant run in the sandbox, shared by replay contexts
(``workers.engine.context``), cron deliveries (``workers.cron_tasks``) and Version checks:
:mod:`workers.sandbox.receive` is the one loop that takes a child's frames (its ``log`` frames,
its egress records, the wait bounds)."""
