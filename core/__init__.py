"""The host's pure core: configuration and domain rules only the host runs.

``config`` (the host's settings from the environment), ``cron`` (the cron grammar and matcher),
``progress`` (where an instance is, from the store's facts), ``units`` (sizes as people read
them) and ``processes`` (whether a pid still runs). Nothing here is mounted into a sandbox: tenant code and the sandbox runtime (``takohost``)
never import it, which an import contract checks (``.importlinter``). Standard library only;
pure (no I/O) but for ``config``, which reads the environment, and ``processes``, which reads
``/proc``.
"""
