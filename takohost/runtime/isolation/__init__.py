"""Tenant isolation for sandbox children: namespaces, a minimal read-only root, one identity per
context, no capabilities, resource limits (docs/security.md; docs/spec/architecture.md#ar-sandbox "Tenant isolation").

Every context is one process forked by the zygote (``forking.Forker.fork``) as PID 1 of a new
PID namespace: the zygote switches the PID namespace of its *next* child with ``unshare
(CLONE_NEWPID)`` and switches back with ``setns`` right after the fork, so it never leaves its
own. When PID 1 of a PID namespace dies the kernel kills every other process in it and reports
the exit only after them: a readable pidfd of the child is therefore the proof that nothing the
tenant started (``setsid``, double forks, daemons, threads) is still alive.

The child then enters its sandbox (``forking.Forker.enter``): it joins a private copy of a
*template* mount namespace built once per zygote (``mounts.build_template``: a fresh tmpfs root
holding read-only bind mounts of what an interpreter needs: ``/usr``, the interpreter's prefix
with its ``site-packages`` hidden; a copy of the SDK at ``/takohost/sdk``, a few ``/etc`` files,
``/dev`` nodes), takes new mount, network, IPC and UTS namespaces, mounts its own ``/proc`` and
a size-limited scratch ``/tmp``; the host's checkout, virtualenv, data directory and ``/tmp`` are
not in it. The network namespace has no way out but the host's egress proxy (``network``; or,
with ``TAKOHOST_SANDBOX_NETWORK=none``, no interface up): the host's Postgres, Redis and API
are not reachable from it.

Identity (``identity``, ``uids``): when the host runs as root each context gets a uid/gid of
its own (``uid_base`` + a slot of the machine's pool, held by the zygote while the context lives:
unique among the live contexts of the machine, shared with no host process, so
``RLIMIT_NPROC`` counts one context; never derived from a host pid); otherwise the zygote enters a user
namespace once and contexts map to the host's uid. Either way every capability is dropped,
``no_new_privs`` is set and a system-call filter (``seccomp``) refuses what namespaces do not
separate.

One concern a module: ``policy`` (what the host decides, ``TAKOHOST_SANDBOX_*``), ``syscalls``
(the C library's calls and constants), ``mounts`` (the layout and the template root),
``seccomp`` (the filter and its assembler), ``network`` (the namespace's one way out, the host's
egress proxy),
``cgroups`` (per-context memory), ``identity`` (uid, capabilities, limits, dumpable) and
``uids`` (the pool of per-context uids) and ``forking`` (the forker and the probe). Callers import this package and name the module:
``isolation.policy.Policy``, ``isolation.forking.Forker``.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

from takohost.runtime.isolation import (
    cgroups,
    forking,
    identity,
    mounts,
    network,
    policy,
    seccomp,
    syscalls,
    uids,
)

__all__ = ["cgroups", "forking", "identity", "mounts", "network", "policy", "seccomp", "syscalls", "uids"]
