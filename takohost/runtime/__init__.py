"""The user-code sandbox: fork server (``zygote``), child runtime (``child``, ``step``,
``bindings``) and the parent ↔ child wire protocol (``protocol``, ``PROTOCOL.md``).

Everything in this package runs inside the zygote or a sandbox child and imports only the
standard library and ``takohost`` (errors, domain): never Celery, SQLAlchemy, Redis, Flask or
the ``workers``/``models`` packages. The parent side lives in ``workers.sandbox``.
"""
