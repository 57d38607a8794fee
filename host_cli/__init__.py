"""The top floor: the ``takohost`` command line, the dev supervisor and its embedded servers, the
HTTP client and the deploy engine.

Everything here may import every other layer (``host_api``, ``beat``, ``workers``, ``models``,
``takohost``); nothing below imports this package (``.importlinter``). Tenant code never sees it:
the sandbox exposes the ``takohost`` SDK package alone.
"""
