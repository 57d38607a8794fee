"""Imports paid once per Version? A measured design study of a per-Version *template* process
(docs/performance.md, imports paid once per Version): what a context whose main module imports ``requests`` costs today, what it
costs forked from a template that imported it once, and which of the sandbox's guarantees each
template design keeps.

    python -m bench.template_bench                    # 5 alternating rounds of 40 contexts each
    python -m bench.template_bench --rounds 3 --contexts 30

Needs a root host (per-context cgroups and pool uids, as the product on a root host) and
``requests`` importable by this interpreter (the test venv): it and its dependencies are copied
into a package layer of a temporary package directory (a directory named by 40 hex digits, as
``workers.packages`` publishes one), which the product's own template root mounts at
``isolation.mounts.PACKAGE_MOUNT``. Everything the bench creates (temporary directories, cgroups,
processes) is removed at the end, failures included. Prints one JSON object.

What is measured. Each batch runs in a fresh process (``--inner``) that is set up as a zygote:
the product's ``isolation.forking.Forker`` of the default policy (public egress) with the package
directory, then ``zygote._preload`` (as ``bench.floor_bench``). Batches alternate
``a, b, c, d, e, f, a, b, …``. A context is: start → isolation → the Version's main module imported
(``child.importer.import_version``; the layer appended by ``add_packages``) → the effect (a
function of the main module) → its timestamp written to a pipe → exit and reap. Only that: the
product's protocol work around a context (job and hello frames, logs) is not in these figures,
which therefore are the part of ``bench.packages_bench``'s figures that the import and the
isolation make.

- ``a_today_requests`` — today's path: ``Forker.fork`` + ``Forker.enter`` unchanged (uid from
  the pool, memory and freezer cgroups, PID 1 of a new PID namespace, a private copy of the
  template root, mount/network/IPC/UTS/cgroup namespaces with lo, AnyIP routes and the egress
  listeners, own ``/proc`` and ``/tmp``, limits, no capabilities, no_new_privs, the seccomp
  filter), then the import of ``requests``; the parent reaps and ``Forker.release`` s.
- ``c_today_stdlib`` — ``a`` with a main module importing ``json`` and ``urllib.request``
  (``bench.packages_bench``'s baseline). The ratios are against it.
- Templates (``b``, ``d``, ``e``, ``f``). The parent makes the template's own memory cgroup and takes a
  pool uid, forks ``T0``: it joins that cgroup and the template mount namespace (``setns`` of
  ``Forker.template_fd``), takes a private copy of it and a fresh root-owned PID namespace whose
  child ``P`` replaces the zygote-namespace ``/proc`` of the template root by its own (see 4);
  ``P`` drops its groups and enters a **new user namespace** (the parent maps uid/gid 1000 in it
  to the pool uid — never host root — and denies ``setgroups``), then new mount, PID, network,
  IPC, UTS and cgroup namespaces owned by it, and forks ``T1`` (PID 1, a reaper) which forks
  ``T`` (PID 2, see 1). ``T`` mounts its own ``/proc`` and ``/tmp``, narrows ``sys.path`` and the
  finders as ``Forker.enter`` does, applies the limits and its system-call filter (by variant),
  imports the main module **once**, checks what the import left, blocks every signal, freezes
  and disables the collector and reports ready. Per context the parent makes the context's
  memory and freezer cgroups and asks ``T``; ``T`` forks ``C`` (``b``, ``d``: after
  ``unshare(CLONE_NEWPID)``, ``setns`` back after, as ``Forker.fork``; ``f``: see there), which
  waits on a pipe
  while the parent — the only one trusted to — finds its host pid from the kernel
  (``/proc/<T>/task/<T>/children``) and writes it into both cgroups' ``cgroup.procs``; on the go
  ``C`` restores the signal mask and the collector, takes its namespaces, mounts its ``/proc`` and
  ``/tmp``, configures its network and opens the listeners (as ``Forker.enter``), drops every
  capability, sets no_new_privs, installs the product's filter (``Forker.filter``) and checks
  that ``unshare`` now fails, runs the effect; ``T`` reaps it; the parent removes the cgroups.
  - ``b_template_requests``: ``T`` keeps every capability of its user namespace and runs the
    import under the product's filter less ``unshare``, ``setns``, ``mount``, ``umount2``
    (:data:`TEMPLATE_ALLOWED`: what ``T`` and ``C`` need before ``C``'s own filter).
  - ``d_template_unotify_requests``: ``T`` keeps ``CAP_SYS_ADMIN`` alone (``capset``) and those
    four calls go to a supervisor (:class:`Supervisor`, seccomp_unotify(2)) in the parent, which
    lets them continue only from ``T`` after its import was checked and from a placed ``C``, and
    refuses them (``EPERM``) to import code; ``C`` takes its network namespace inside a user
    namespace of its own (``CAP_NET_ADMIN`` there only).
  - ``e_template_nocaps_requests``: ``T`` drops **every** capability before the import, under the
    same supervised filter; ``C`` takes a user namespace of its own with all the others (its uid
    mapped), forks its PID 1, which does the rest; the supervisor also allows a caller whose
    parent it allows (that PID 1, before its filter).
  - ``f_template_clone_requests``: ``e`` without the second fork: ``T`` (no capability) forks
    each ``C`` with one ``clone(CLONE_NEWUSER | CLONE_NEWPID)`` (no capability needed; the
    interpreter's at-fork work done around it with ``PyOS_BeforeFork``/``PyOS_AfterFork_*``), a
    ``clone`` with namespace flags being supervised like the four calls (allowed to ``T`` after
    its import only); ``C`` maps its uid and takes the other namespaces itself.

Figures per context, medians over rounds of each batch's value: ``cpu_ms`` — CPU of every
process involved, as deltas over the timed batch: the parent's own, all threads, and its reaped
children's (``getrusage``, microseconds), plus ``T`` with its reaped contexts (its own
``getrusage``, asked over the control socket) and ``T0``, ``P``, ``T1`` (``/proc``, ticks; they
only wait). ``kworker_net_ms`` — kernel worker threads' runtime over the batch and 0.3 s after it,
minus an equally long idle span right after (``bench.proc_cpu.kernel_threads``, as
``bench.floor_bench``: network namespaces and memory cgroups are torn down there, charged to no
process; on a shared machine it is noisy and can come out below zero); ``cpu_with_kworker_ms``
their sum. ``first_effect_p50_ms`` — from the parent's decision to start a context (before
``Forker.fork``, or before making the cgroups and asking ``T``) to the effect's timestamp
(``time.perf_counter``: ``CLOCK_MONOTONIC``, one clock in every namespace here). Templates also
report their one-off cost (``template_setup_ms``, ``template_setup_cpu_ms``, ``import_ms``), the
phases of a context, ``roundtrip_us`` (parent → ``T`` → parent, one byte), the supervised calls
per context, what the import left, what the import's privileges allow (``template_*`` probes, run
in a throw-away child of ``T`` with ``T``'s privileges and filter) and checks of one context
(``context_*``). The top level has the ratios to ``c`` and ``uptime`` before and after.

MEASURED (this machine: 2 cores shared with other sessions, CPython 3.11.7, Linux 6.18, cgroup v1
memory and freezer; ``--rounds 5 --contexts 40``, one run at 18:37 UTC on 2026-12-04; an earlier
run without ``f`` gave CPU ratios b 0.95, d 1.02, e 1.50 and first-effect ratios 0.93, 0.85, 1.47):
    variant (per context)          cpu_ms  +kworker  first_effect_p50_ms  ratio to c (cpu+kw, p50)
    a today, requests              54.97   56.43     69.26                9.70, 13.42
    b template, all caps           4.65    5.24      3.45                 0.90, 0.67
    c today, stdlib (baseline)     5.13    5.82      5.16                 1
    d template, SYS_ADMIN only     4.70    5.28      3.91                 0.91, 0.76
    e template, no caps, 2 forks   7.80    8.50      5.84                 1.46, 1.13
    f template, no caps, clone     5.05    5.72      4.28                 0.98, 0.83

  Once per template: ``import_ms`` 47–52, ``template_setup_ms`` 76–88 (fork to ready,
  import included), ``template_setup_cpu_ms`` 54–57. Per context in a template: asking ``T`` until it
  had forked 0.8–1.5 ms, placing into the cgroups 0.12–0.16 ms, go → effect
  2.1 (b), 1.8 (d), 4.6 (e), 2.5 (f) ms; parent ↔ ``T`` round trip 7–48 µs; supervised calls
  continued per context 6 (d), 3 (e), 4 (f); the import's probes' 3 refused. Load averages (``uptime``) before: 7.14, 4.44, 4.04;
  after: 2.85, 3.74, 3.83 (other sessions' work). A confirming run of this file (18:40 UTC, load
  1.7–1.8): ratios to ``c`` (CPU with kworker, first effect) a 8.74, 13.68; b 0.80, 0.71; d 0.88,
  0.88; e 1.23, 1.23; f 0.97, 0.88.

  Verdict. ``b`` meets both 1.3× targets and is **not sound**: the Version's import code runs with
  every capability of a user namespace and may create namespaces and mount (4). ``d`` meets them
  and keeps the product's filter for import code, but import code keeps ``CAP_SYS_ADMIN`` over
  the template's own UTS and IPC namespaces (4). ``e`` keeps every guarantee of 1–4 and costs
  1.23–1.50× the CPU over three runs — at the target or over it (the second fork per context). ``f`` keeps every guarantee of 1–4 — fresh module
  state for eligible Versions (1), per-context PID namespace, cgroups and stop proof (2),
  per-context egress namespace (3), no capability and the product's filter for import code and
  context code alike (4) — and meets both targets: **``f`` is the sound design**, at 0.98× the
  CPU and 0.83× the first-effect latency of a stdlib-only context today. Not kept by any
  template as built here: one pool uid per live context (5: the Version's contexts share the
  template's; mapping a range of pool uids into the template's user namespace, one per live
  context, would restore it). Today's path (``a``) keeps everything at 9.7× the CPU and 13× the
  latency.

Soundness, guarantee by guarantee (man pages: fork(2), clone(2), unshare(2), setns(2),
user_namespaces(7), pid_namespaces(7), mount_namespaces(7), capabilities(7), seccomp(2),
seccomp_unotify(2), cgroups(7), proc(5), signal(7), setitimer(2), timer_create(2)):

1. Fresh module state per context (docs/spec/durable-workflow.md#dw-replay). The argument: a context's module state must be the
   state a fresh evaluation of the Version's modules produces. Module and constructor code are
   deterministic by the Form (docs/spec/durable-workflow.md#dw-replay), so evaluating them once and copying the resulting memory (fork(2)
   copies the address space, copy-on-write) gives every child the state a fresh evaluation would
   have produced — *provided the evaluation's whole state is in the forking thread's memory and
   nothing of the tenant's ran since*. Today's zygote already relies on this for the standard
   library and runtime it preloads (hash seed, ``logging``'s start time, caches are shared by
   every context today). Where fork(2) copies something else, the template must check and refuse
   the Version (today's path), not paper over it:
   - threads started by import code: only the forking thread is copied (and locks they held are
     copied held); a fresh evaluation would have them. ``T`` counts ``/proc/self/task`` after the
     import (``import_threads``: 1 for ``requests``) — refuse above 1.
   - processes started by import code stay alive beside ``T``: ``import_children`` must be 0.
   - descriptors opened and kept by import code (a log file, a socket, an entropy handle) would
     share one *open file description* — offset, socket, connection — between ``T`` and every
     context of the Version: a cross-context channel a fresh evaluation never has
     (``import_new_fds``: 0 for ``requests``) — refuse above 0.
   - timers (``alarm``, setitimer(2), timer_create(2)), memory and record locks, pending signals,
     aio are not inherited by fork(2): a fresh evaluation that armed ``signal.alarm`` would be
     interrupted, a template's child not. ``T`` reads both itimers (``import_timers_armed``);
     POSIX timers are not read (a gap: none of the Version's own code may use them, by the Form's replay rule).
     Handlers and the signal mask are inherited like module state; ``T`` blocks every signal while
     it serves, so no tenant handler runs in it, and each child restores the mask.
   - values drawn at import (``random.random()``, ``secrets``, ``uuid4()``, ``time.time()`` in a
     global; a ``random.Random()`` instance — only the module-level generator is reseeded in a
     forked child, by ``os.register_at_fork``) are the same in every context of the Version, where
     fresh evaluations would differ. The Form's replay rule excludes them from the Version's own code; a
     third-party package that derives a secret at import would share it across the Version's
     contexts (never across Versions or Spaces). ``requests`` does not.
   - pids: every context is PID 1 of its namespace; a template that were PID 1 too would hide the
     fork from code that detects one by a pid change (``tempfile._RandomNameSequence``, DRBGs), so
     ``T`` is PID 2 (OpenSSL 3.0.19 here reseeded anyway, in a probe).
   - identity read at import: the uid (``T``: 1000 of its namespace; a context: 0 of its own in
     ``e``/``f``, 1000 in ``b``/``d``; the pool uid on the host in all), the pid (2), the cwd
     (``/tmp``) and the host name (``localhost``, set before the import) are ``T``'s; a value
     computed from them at import is ``T``'s in every context.
   - atexit handlers, ``sys`` hooks, ``gc`` state are copied as module state; ``T`` ends with
     ``os._exit`` (a tenant's atexit never runs in it).
   - memory accounting: pages the import touched are charged to the template's cgroup (cgroups(7):
     to the first toucher), not the context's — the context's limit no longer counts the
     Version's imported modules; the template's cgroup needs a limit of its own (it has one here).
   Verdict: **sound** for a Version whose import leaves one thread, no process, no descriptor and
   no armed itimer (``eligible``: true for ``requests``), under the Form's determinism rule; values
   drawn at import are shared by the Version's contexts.
2. Per-context PID namespace and the stop proof: **kept** in every template variant. ``C`` (``e``:
   its PID 1) is PID 1 of a PID namespace of its own. The parent places ``C`` into its own freezer
   and memory cgroups before it runs anything but its wait, so every descendant is born in them;
   ``T``'s mount namespace has no cgroup file system, cgroup v1 cannot be mounted in a user
   namespace, and a ``cgroup2`` that ``T``'s import code mounts (with a cgroup namespace of its
   own) is owned by host root, whom its user namespace does not map: ``cgroup.procs`` refuses it
   (``template_cgroup2_movable``: false, ``b``). Measured on one context per batch: frozen before
   its go, it got the go and wrote nothing until thawed (``context_freeze_confirmed``,
   ``frozen_context_stayed_silent``). The template must not place children into cgroups itself
   (tenant code ran in it): the parent does, from the kernel's list of ``T``'s children — one
   round trip per context, in the figures.
3. Per-context network namespace for egress tagging (docs/egress.md): **kept** — each ``C`` takes
   its own network namespace, configured with ``network.configure`` and ``network.listeners`` as
   ``Forker.enter`` does; the proxy tags a connection by the namespace that accepted it. ``T``'s
   own namespace has no listener: import code reaching the network fails (a fresh evaluation's
   would go through the proxy) — such a Version is not for a template.
4. No capabilities and the product's filter for tenant code. To make per-context PID, mount and
   network namespaces and mount a context's ``/proc``, the forking process needs
   ``CAP_SYS_ADMIN`` (``CAP_NET_ADMIN`` for the network) in a user namespace owning them
   (user_namespaces(7); unshare(2), setns(2)); and the calls ``C`` makes before its own filter
   must pass any filter ``T`` carries, since filters are inherited and only add (seccomp(2)).
   Import code runs in ``T``.
   - ``b`` **does not keep it**: import code runs with every capability of ``T``'s user namespace
     and may ``unshare``, ``setns``, ``mount``, ``umount2`` — exactly what the product's filter
     refuses to tenant code ("nested namespaces, mounts … the usual ways to attack the kernel"). It
     can (``template_*`` probes): make user/mount/network namespaces, mount what a user namespace
     may (tmpfs, proc, overlayfs, binfmt_misc on recent kernels — the surface of the
     unprivileged-user-namespace CVEs, e.g. CVE-2023-0386 in overlayfs), mount over any path every
     later context of the Version sees, use ``CAP_NET_ADMIN`` through route netlink in its own
     network namespace (traffic control and virtual links: CVE-2023-3609/-4206/-4207/-4208 in
     ``net/sched`` classifiers were reached this way). It cannot: open a netfilter socket (the
     product's socket-family filter stays on ``T``: no nf_tables, CVE-2024-1086's path); unmount,
     reveal what is under, or clear the read-only/nosuid/nodev flags of a mount inherited from the
     template root (mount_namespaces(7): mounts copied into a namespace owned by a less privileged
     user namespace are locked, ``MNT_LOCKED``, ``MNT_LOCK_READONLY`` …:
     ``template_can_unmount_locked``: false); touch host files beyond "other" permissions (host
     root is unmapped: ``CAP_DAC_OVERRIDE`` there does not apply to them); touch cgroups (2); see
     or signal another Space's processes. One leak is closed by construction: the kernel mounts a
     new ``proc`` in a user namespace only where a fully visible one exists (the runc reports on
     ``mount_too_revealing``), so the template root's ``proc`` stays, locked, under ``T``'s own —
     and import code can unmount ``T``'s to read it. Unmodified, that is the zygote's PID
     namespace: the host's process list. Here ``P`` first replaces it (as root, before the user
     namespace) by the ``proc`` of a PID namespace of the template's alone, so what is under is
     the template's own few processes (``template_revealed_proc_pids``: 4). Covering the host's
     ``proc`` with a locked tmpfs instead makes the kernel refuse ``T``'s ``proc`` (EPERM; probed).
   - ``d`` **keeps the filter, not quite the capabilities**: the four calls are refused to import
     code by the supervisor (``template_can_unshare_mount``/``_mount``/``_unshare_user``: false)
     and ``CAP_NET_ADMIN`` is gone (``template_has_net_admin``: false), but import code holds
     ``CAP_SYS_ADMIN`` over ``T``'s own UTS and IPC namespaces (host name, SysV IPC
     administration of namespaces no context shares). The supervisor decides by the caller's pid
     and phase, never by pointer arguments, so the notifier's documented TOCTOU (a thread
     rewriting arguments; ``SECCOMP_USER_NOTIF_FLAG_CONTINUE`` in ``linux/seccomp.h``) does not
     apply: the callers it lets through are single-threaded and run the runtime's code only;
     after ``C`` installs the product's filter its own ``EPERM`` takes precedence over the
     notification (seccomp(2)'s order of actions), so a context's tenant code is never asked
     about.
   - ``e`` **keeps it**: import code runs with no capability at all under the product's filter,
     the four calls refused by the supervisor — what today's contexts have, plus a user namespace
     it cannot use (no capability, no ``unshare``). The price is one more fork per context
     (``C`` makes its own user and PID namespaces and forks its PID 1).
   - ``f`` **keeps it**, as ``e``, without the second fork: ``T`` needs no capability to
     ``clone`` a child into a new user and PID namespace (user_namespaces(7): creating a user
     namespace needs none, and the PID namespace created with it is owned by it), and that
     ``clone`` is supervised (allowed to ``T`` after its import only), so import code can make
     no namespace at all (``template_can_unshare_user``: false). ``C`` has every capability in
     its own user namespace only, before it drops them, and runs the runtime's code only until
     then. ``T``, in the parent user namespace with the same uid as that namespace's owner, holds
     every capability over its contexts' namespaces (user_namespaces(7)) — the reason ``T`` may
     run no tenant code after its import (1: one thread, signals blocked, collector off).
5. Spaces never share a template: **required, and kept by construction** — a template is per
   Version, a Version belongs to one Space, and the template's user, PID, mount and network
   namespaces, its cgroup and its pool uid are its own; nothing of it is reachable from another
   Space's contexts. Contexts of one Version do share the template's uid (its user namespace maps
   one): ``RLIMIT_NPROC`` then counts the Version's live contexts together, where today each
   context has a pool uid of its own — a template needs a range of pool uids mapped (one per
   live context, ``setresuid`` in ``C`` before it drops ``CAP_SETUID``) to keep that.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from bench import proc_cpu

VARIANTS = ("a_today_requests", "b_template_requests", "c_today_stdlib", "d_template_unotify_requests",
            "e_template_nocaps_requests", "f_template_clone_requests")
#: Template variants and their mode: ``caps`` (every capability in its user namespace, the filter
#: less four calls), ``unotify`` (``CAP_SYS_ADMIN`` alone, the four calls supervised), ``nocaps``
#: (no capability, the four calls supervised; each context makes its own user and PID namespace),
#: ``clone`` (no capability; ``T`` forks each context into a new user and PID namespace with one
#: ``clone``, supervised like the four calls).
TEMPLATES = {"b_template_requests": "caps", "d_template_unotify_requests": "unotify",
             "e_template_nocaps_requests": "nocaps", "f_template_clone_requests": "clone"}
MAINS = {
    "requests": "import requests\n\ndef effect():\n    return requests.__version__\n",
    "stdlib": "import json, urllib.request\n\ndef effect():\n    return json.dumps({'a': 1})\n",
}
#: What the layer holds: ``requests`` and its dependencies as the test venv has them.
LAYER_PACKAGES = ("requests", "urllib3", "idna", "charset_normalizer", "certifi")
_SETTLE_SECONDS = 0.3
#: The template's uid and gid in its user namespace (the pool uid on the host).
TEMPLATE_UID = 1000
_WARM_UP = 3


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator`` rounded to 2 places; ``None`` when the denominator is not
    positive (pure)."""
    return round(numerator / denominator, 2) if denominator > 0 else None


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (nearest rank; pure). ``ValueError`` if empty."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def make_layer(scratch: str) -> tuple[str, str]:
    """A package directory under ``scratch`` with one layer holding :data:`LAYER_PACKAGES` copied
    from this interpreter (mtimes kept, so their ``.pyc`` stay valid); ``(directory, layer name)``."""
    import importlib.util

    name = hashlib.sha1(b"takohost-template-bench").hexdigest()
    directory = os.path.join(scratch, "packages")
    layer = os.path.join(directory, name)
    os.makedirs(layer)
    for package in LAYER_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"{package} is not importable here: run with the test venv")
        shutil.copytree(list(spec.submodule_search_locations)[0], os.path.join(layer, package))
    for root, _dirs, files in os.walk(scratch):
        os.chmod(root, 0o755)
        for file in files:
            os.chmod(os.path.join(root, file), 0o644)
    return directory, name


def _job(main: str, layer: str) -> dict:
    job = {"modules": {"main.py": MAINS[main]}, "mainModule": "main.py"}
    if main == "requests":
        job["packages"] = layer
    return job


def _read_exact(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise RuntimeError("the context exited before its effect")
        data += chunk
    return data


def _read_socket(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the template closed its control socket")
        data += chunk
    return data


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _remove_memory(memory, path: str) -> None:
    """Remove a memory cgroup ``MemoryCgroup.make`` made (``remove``; ``release`` before the
    isolation package named both kinds' clean-up alike)."""
    (getattr(memory, "remove", None) or memory.release)(path)


def _host_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[2])
    return -1


def _cgroup_lines(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        return f.read()


class _Setup:
    """The zygote-like parent's state: the product's Forker of the default policy with the
    package directory, then the zygote's preload (as ``bench.floor_bench``)."""

    def __init__(self, packages_dir: str) -> None:
        from takohost.runtime import child, isolation, zygote

        self.isolation = isolation
        policy = isolation.policy.Policy(packages_dir=packages_dir)
        layout = isolation.mounts.Layout.compute(policy)
        self.children_dir = zygote._make_children_dir()
        self.forker = isolation.forking.Forker(layout, root=self.children_dir)
        if self.forker.memory is None or self.forker.freezer is None or self.forker.uids is None:
            self.close()
            raise SystemExit("needs a root host with memory and freezer cgroups")
        zygote._preload()
        self.importer = child.importer
        self.importer.PACKAGES_ROOT = isolation.mounts.PACKAGE_MOUNT

    def close(self) -> None:
        self.forker.close()
        shutil.rmtree(self.children_dir, ignore_errors=True)


def _today_context(setup: _Setup, job: dict) -> float:
    """One context of today's path; returns fork → effect in ms."""
    forker = setup.forker
    reader, writer = os.pipe()
    started = time.perf_counter()
    pid = forker.fork()
    if pid == 0:
        code = 1
        try:
            os.close(reader)
            forker.enter()
            for sock in forker.egress:  # the product hands them to the host's proxy
                sock.close()
            module, _ = setup.importer.import_version(job)
            module.effect()
            os.write(writer, struct.pack("d", time.perf_counter()))
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    try:
        (effect,) = struct.unpack("d", _read_exact(reader, 8))
    finally:
        os.close(reader)
        _, status = os.waitpid(pid, 0)
        forker.release(pid)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"context exited with {status}")
    return (effect - started) * 1000


# ---------------------------------------------------------------- the template (variant b)


def _template_process(setup: _Setup, job: dict, space_memory: str, control: socket.socket,
                      to_parent: int, from_parent: int, mode: str) -> None:
    """``T0`` (a child of the parent): enter the Space's sandbox; its child ``P`` (PID 1 of a
    root-owned PID namespace whose proc replaces the zygote's) enters the user namespace and the
    others and forks ``T1`` → ``T``."""
    iso = setup.isolation
    sc = iso.syscalls
    forker = setup.forker
    iso.cgroups.join(space_memory)
    sc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    sc.setns(forker.template_fd, sc.CLONE_NEWNS)
    # A private copy of the template root (never change the zygote's), and in it, in place of the
    # zygote-namespace /proc, the proc of a fresh PID namespace of this template's alone: the
    # user namespace's mount namespace keeps it locked under T's own /proc (the kernel mounts a
    # new proc in a user namespace only where a fully visible one exists: mount_namespaces(7)),
    # and what T's import code would find under its own /proc is then its own processes only.
    sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWPID)
    p0 = os.fork()
    if p0 != 0:  # T0 only waits
        os.close(to_parent)
        control.close()
        os.waitpid(p0, 0)
        os._exit(0)
    sc.prctl(1, signal.SIGKILL)
    sc.mount("proc", "/tmp", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    sc.umount("/proc")
    sc.mount("/tmp", "/proc", None, sc.MS_MOVE)
    os.setgroups([])
    sc.check(sc.function("unshare")(sc.CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
    os.write(to_parent, b"u")
    if os.read(from_parent, 1) != b"m":  # the parent wrote our uid and gid maps
        os._exit(3)
    # Uid 1000 of the namespace is the pool uid on the host; it has no root: a context's own user
    # namespace may then map its uid without CAP_SETFCAP (user_namespaces(7), Linux 5.12). The
    # creator keeps every capability in the namespace (no root uid there to change from).
    os.setresgid(TEMPLATE_UID, TEMPLATE_UID, TEMPLATE_UID)
    os.setresuid(TEMPLATE_UID, TEMPLATE_UID, TEMPLATE_UID)
    sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWPID | sc.CLONE_NEWNET | sc.CLONE_NEWIPC
               | sc.CLONE_NEWUTS | sc.CLONE_NEWCGROUP)
    socket.sethostname("localhost")  # import code must not read the machine's name either
    t1 = os.fork()
    if t1 == 0:  # PID 1 of the template's namespace: a reaper only
        sc.prctl(1, signal.SIGKILL)
        t = os.fork()
        if t == 0:
            sc.prctl(1, signal.SIGKILL)
            try:
                _serve(setup, job, control, to_parent, mode)
            finally:
                os._exit(0)
        os.close(to_parent)
        control.close()
        while True:
            try:
                pid, _ = os.wait()
            except ChildProcessError:
                os._exit(0)
            if pid == t:
                os._exit(0)
    os.close(to_parent)
    control.close()
    os.waitpid(t1, 0)
    os._exit(0)


#: The calls of ``seccomp.DENIED_CALLS`` a template cannot refuse: ``T`` switches the PID
#: namespace of its next child and back, each ``C`` takes its namespaces and mounts its /proc and
#: /tmp before it installs the whole filter.
TEMPLATE_ALLOWED = ("unshare", "setns", "mount", "umount2")


def _template_program(iso) -> list[tuple[int, int, int, int]]:
    """The product's filter program (``seccomp.program``, unchanged) built with
    :data:`TEMPLATE_ALLOWED` taken out of this process's copy of its denied calls."""
    import platform

    denied = iso.seccomp.DENIED_CALLS[platform.machine()]
    saved = dict(denied)
    try:
        for name in TEMPLATE_ALLOWED:
            denied.pop(name, None)
        return iso.seccomp.program()
    finally:
        denied.clear()
        denied.update(saved)


def _template_filter(iso):
    """:func:`_template_program` packed (``seccomp.Filter``)."""
    return iso.seccomp.Filter(_template_program(iso))


_CAP_SYS_ADMIN = 21


def _keep_only_capability(cap: int | None) -> None:
    """``capset``: this process keeps ``cap`` alone (``None``: none) in its effective and permitted
    sets (in its user namespace), none inheritable; irrevocable."""
    import ctypes
    import platform

    header = ctypes.create_string_buffer(struct.pack("II", 0x20080522, 0), 8)
    bits = 0 if cap is None else 1 << cap
    data = ctypes.create_string_buffer(struct.pack("6I", bits, bits, 0, 0, 0, 0), 24)
    libc = ctypes.CDLL(None, use_errno=True)
    number = {"x86_64": 126, "aarch64": 91}[platform.machine()]
    if libc.syscall(ctypes.c_long(number), ctypes.c_void_p(ctypes.addressof(header)),
                    ctypes.c_void_p(ctypes.addressof(data))) != 0:
        raise OSError(ctypes.get_errno(), "capset")


SECCOMP_RET_USER_NOTIF = 0x7FC00000
_BPF_JA = 0x05


def unotify_program(rest: list[tuple[int, int, int, int]], arch: int, numbers: list[int],
                    clone: tuple[int, int] | None = None) -> list[tuple]:
    """``rest`` (a filter program, ``(code, jt, jf, k)``) behind a prefix that hands the calls
    ``numbers`` of architecture ``arch`` to the supervisor (``SECCOMP_RET_USER_NOTIF``), and with
    ``clone`` (``(its number, a flag mask)``) a ``clone`` whose flags meet the mask too; any other
    call, or another architecture, goes on to ``rest`` (pure). At most 250 numbers."""
    count = len(numbers)
    extra = 3 if clone else 1  # JEQ clone, LD flags, JSET mask — or one JA
    notify = 3 + count + extra  # index of the RET USER_NOTIF
    start = notify + 1  # index of rest's first instruction
    program = [(0x20, 0, 0, 4), (0x15, 0, start - 2, arch), (0x20, 0, 0, 0)]
    for index, number in enumerate(numbers, start=3):
        program.append((0x15, notify - index - 1, 0, number))
    if clone:
        program.append((0x15, 0, 3, clone[0]))  # not clone: on to rest
        program.append((0x20, 0, 0, 16))  # its flags (args[0], low 32 bits)
        program.append((0x45, 0, 1, clone[1]))  # JSET: notify, else on to rest
    else:
        program.append((_BPF_JA, 0, 0, 1))
    program.append((0x06, 0, 0, SECCOMP_RET_USER_NOTIF))
    return program + list(rest)


def _install_unotify(iso, *, clone: bool = False) -> int:
    """Install on this process the template filter whose :data:`TEMPLATE_ALLOWED` calls go to a
    supervisor: the listener's descriptor (``seccomp(SECCOMP_SET_MODE_FILTER,
    SECCOMP_FILTER_FLAG_NEW_LISTENER)``; needs ``CAP_SYS_ADMIN`` in this user namespace or
    no_new_privs)."""
    import ctypes
    import platform

    machine = platform.machine()
    denied = iso.seccomp.DENIED_CALLS[machine]
    program = unotify_program(_template_program(iso), iso.seccomp.AUDIT_ARCH[machine],
                              [denied[name] for name in TEMPLATE_ALLOWED],
                              (iso.seccomp.CLONE[machine], iso.syscalls.CLONE_NEW_ANY) if clone else None)
    raw = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    instructions = ctypes.create_string_buffer(raw, len(raw))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(program), ctypes.addressof(instructions)), 16)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = {"x86_64": 317, "aarch64": 277}[machine]
    fd = libc.syscall(ctypes.c_long(number), ctypes.c_long(1), ctypes.c_long(8), ctypes.c_void_p(ctypes.addressof(fprog)))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)")
    return fd


class Supervisor:
    """The parent's answer to the template's notified calls (seccomp_unotify(2)), in a thread:
    a call continues (``SECCOMP_USER_NOTIF_FLAG_CONTINUE``) only when its caller's pid (as this
    process sees it) is in :attr:`allowed` — ``T`` once its import was checked, each ``C`` from
    its placement on (its own whole filter then refuses these calls before they are notified) —
    and fails with ``EPERM`` otherwise (import code). The decision reads no pointer argument, so
    the notifier's TOCTOU (a thread rewriting them) does not apply; the callers allowed are
    single-threaded and run the runtime's code only."""

    _RECV, _SEND = 0xC0502100, 0xC0182101  # _IOWR('!', 0, 80 bytes), _IOWR('!', 1, 24 bytes)

    def __init__(self, fd: int, *, parents: bool = False) -> None:
        import threading

        self.fd = fd
        #: Also allow a caller whose parent is allowed (variant ``e``: the context's PID 1, forked
        #: by the context before either has its own filter; one whose parent died has T1 for
        #: parent, never allowed).
        self.parents = parents
        self.allowed: set[int] = set()
        self.continued = 0
        self.refused = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import errno
        import fcntl

        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self.stopping:
            events = poller.poll(100)
            if not events:
                continue
            if not events[0][1] & select.POLLIN:
                return  # POLLHUP: no process uses the filter any more
            buffer = bytearray(80)
            try:
                fcntl.ioctl(self.fd, self._RECV, buffer, True)
            except OSError:
                continue  # the caller died meanwhile
            ident, pid = struct.unpack_from("QI", buffer)
            allow = pid in self.allowed or (self.parents and _ppid(pid) in self.allowed)
            answer = struct.pack("QqiI", ident, 0, 0 if allow else -errno.EPERM, 1 if allow else 0)
            try:
                fcntl.ioctl(self.fd, self._SEND, bytearray(answer), True)
            except OSError:
                continue
            if allow:
                self.continued += 1
            else:
                self.refused += 1

    def close(self) -> None:
        self.stopping = True
        self.thread.join(timeout=2)
        os.close(self.fd)


def _rusage_seconds() -> float:
    """This process's CPU seconds, its own and its reaped children's (``getrusage``: microsecond
    resolution, where ``/proc/<pid>/stat`` and ``os.times`` count clock ticks)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _clone_function():
    """``fork`` into a new user and PID namespace, as one ``clone(CLONE_NEWUSER | CLONE_NEWPID |
    SIGCHLD)`` with the interpreter's own before/after-fork work (``PyOS_BeforeFork``,
    ``PyOS_AfterFork_Parent``/``_Child``: the at-fork hooks run as for ``os.fork``). Needs no
    capability (user_namespaces(7)). Returns a function: the child's pid, or 0 in the child."""
    import ctypes
    import platform

    from takohost.runtime.isolation import syscalls as sc

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    number = {"x86_64": 56, "aarch64": 220}[platform.machine()]
    flags = ctypes.c_long(sc.CLONE_NEWUSER | sc.CLONE_NEWPID | int(signal.SIGCHLD))
    api = ctypes.pythonapi

    def clone() -> int:
        api.PyOS_BeforeFork()
        pid = libc.syscall(ctypes.c_long(number), flags, ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0),
                           ctypes.c_long(0))
        if pid == 0:
            api.PyOS_AfterFork_Child()
            return 0
        error = ctypes.get_errno()
        api.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(error, "clone(CLONE_NEWUSER | CLONE_NEWPID)")
        return pid

    return clone


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def _serve(setup: _Setup, job: dict, control: socket.socket, to_parent: int, mode: str) -> None:
    """``T``: its own /proc and /tmp, the Version's import once, then a context per request."""
    iso = setup.isolation
    sc = iso.syscalls
    forker = setup.forker
    policy = forker.layout.policy
    from takohost.runtime.isolation import forking

    sc.mount("proc", "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    sc.mount("tmpfs", "/tmp", "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, f"size={policy.scratch_mb}m,mode=0700")
    os.chdir("/tmp")
    sys.path[:] = forker.layout.sys_path
    sys.path_importer_cache.clear()
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__module__", "") in forking._STANDARD_FINDERS]
    iso.identity.apply_limits(forker.limits)
    # The product's filter, less the four calls the contexts' set-up needs from T and C (the
    # contexts install the whole filter on top: filters only add, seccomp(2)).
    if mode != "caps":  # ... or with those four handed to the parent, which refuses them to import code
        listener = _install_unotify(iso, clone=mode == "clone")
        _send_fd(control, listener, b"l")
        os.close(listener)
        _keep_only_capability(_CAP_SYS_ADMIN if mode == "unotify" else None)
    else:
        _template_filter(iso).install()
    clone_child = _clone_function() if mode == "clone" else None
    # Could tenant code here reveal the template root's proc (the zygote's PID namespace) under
    # ours? Probed in a throw-away child, which has the template's privileges.
    probes = _probe(sc)
    before = _fds()
    started = time.perf_counter()
    module, _ = setup.importer.import_version(job)
    import_ms = (time.perf_counter() - started) * 1000
    threads = len(os.listdir("/proc/self/task"))
    children = sum(len(_children_of_task(t)) for t in os.listdir("/proc/self/task"))
    new_fds = len(_fds() - before - {control.fileno(), to_parent})
    timers = [signal.getitimer(which) != (0.0, 0.0) for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL,
                                                                   signal.ITIMER_PROF)]
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    gc.collect()
    gc.freeze()
    gc.disable()
    pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    report = {
        "import_ms": round(import_ms, 2), "import_threads": threads, "import_children": children,
        "import_new_fds": new_fds, "import_timers_armed": any(timers),
        "template_pid": os.getpid(), **probes,
    }  # fmt: skip
    report["eligible"] = threads == 1 and children == 0 and new_fds == 0 and not any(timers)
    control.sendall(json.dumps(report).encode() + b"\n")
    os.close(to_parent)
    while True:
        command, effect_fd = _recv_command(control)
        if command == b"p":
            control.sendall(b"p")
            continue
        if command == b"r":
            control.sendall(struct.pack("d", _rusage_seconds()))
            continue
        if command != b"s":
            return
        go_r, go_w = os.pipe()
        if mode in ("caps", "unotify"):
            sc.unshare(sc.CLONE_NEWPID)
        pid = clone_child() if clone_child is not None else os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(go_w)
                os.close(pidns)
                control.close()
                _context(setup, module, go_r, effect_fd, old_mask, mode)
                code = 0
            except BaseException:  # noqa: BLE001 - reported on stderr, the batch then fails
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        if mode in ("caps", "unotify"):
            sc.setns(pidns, sc.CLONE_NEWPID)
        os.close(go_r)
        os.close(effect_fd)
        control.sendall(b"f")
        if control.recv(1) != b"g":
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        os.write(go_w, b"g")
        os.close(go_w)
        _, status = os.waitpid(pid, 0)
        control.sendall(b"x" if os.waitstatus_to_exitcode(status) == 0 else b"e")


def _children_of_task(tid: str) -> list[str]:
    try:
        with open(f"/proc/self/task/{tid}/children") as f:
            return f.read().split()
    except OSError:
        return []


def _probe(sc) -> dict:
    """What import code in ``T`` could do, tried in a throw-away child of ``T`` (the same
    privileges, a private copy of its mount namespace): unmount ``T``'s /proc and list the one
    under it (host pids: the template root's ``proc`` of the zygote's PID namespace); mount
    ``cgroup2`` and move itself in its root; open a netfilter netlink socket (nf_tables);
    mount a tmpfs over a template path; unmount a template mount (locked)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        found: dict = {}
        try:

            def attempt(name, action):
                try:
                    found[name] = bool(action())
                except BaseException as exc:  # noqa: BLE001
                    found[name] = False
                    found[name + "_error"] = str(exc)[:120]

            # A private copy of T's mount namespace, so that the probes below leave T's alone;
            # where refused, only the probes that cannot change T's are tried.
            attempt("template_can_unshare_mount", lambda: sc.unshare(sc.CLONE_NEWNS) or True)
            private = found["template_can_unshare_mount"]

            def reveal():
                sc.umount("/proc")
                pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
                found["template_revealed_proc_pids"] = len(pids)
                return bool(pids)

            def cgroup2():
                os.makedirs("/tmp/cg", exist_ok=True)
                sc.unshare(sc.CLONE_NEWCGROUP)
                sc.mount("cgroup2", "/tmp/cg", "cgroup2", 0)
                sc.write_file("/tmp/cg/cgroup.procs", "0")
                return True

            def netfilter():
                socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12).close()  # NETLINK_NETFILTER
                return True

            def overmount():
                sc.mount("tmpfs", "/usr", "tmpfs", 0, "size=1m")
                return True

            def unlock():
                sc.umount("/usr")  # the tmpfs above, then the template's bind (locked)
                sc.umount("/usr")
                return True

            def scratch_mount():
                os.makedirs("/tmp/.probe", exist_ok=True)
                sc.mount("tmpfs", "/tmp/.probe", "tmpfs", 0, "size=1m")
                sc.umount("/tmp/.probe")
                return True

            if private:
                attempt("template_proc_under_own_revealable", reveal)
                attempt("template_cgroup2_movable", cgroup2)
                attempt("template_can_overmount", overmount)
                attempt("template_can_unmount_locked", unlock)
            attempt("template_can_mount", scratch_mount)
            attempt("template_netfilter_socket", netfilter)

            def net_admin():  # SO_MARK needs CAP_NET_ADMIN over the socket's network namespace
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                    udp.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, 1)
                return True

            attempt("template_has_net_admin", net_admin)
            attempt("template_can_unshare_user", lambda: sc.function("unshare")(sc.CLONE_NEWUSER) == 0)
        finally:
            os.write(writer, json.dumps(found).encode())
            os._exit(0)
    os.close(writer)
    data = b""
    while chunk := os.read(reader, 65536):
        data += chunk
    os.close(reader)
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")


def _context(setup: _Setup, module, go_r: int, effect_fd: int, old_mask, mode: str) -> None:
    """``C``, forked by the template: wait until the parent placed it in its cgroups, then enter
    the context's own namespaces and drop everything, as ``Forker.enter``; run the effect.
    ``unotify`` (variant ``d``: ``T`` kept ``CAP_SYS_ADMIN`` alone): the mount, IPC, UTS and cgroup
    namespaces and the mounts first, owned like its PID namespace by ``T``'s user namespace (the
    kernel mounts a PID namespace's proc only for that owner's capabilities), then a user
    namespace of its own with its network namespace, where it has ``CAP_NET_ADMIN`` to configure
    it. ``nocaps`` (variant ``e``: ``T`` has no capability): a user namespace of its own with
    every other, and a fork: its child is the context's PID 1 (``C`` waits for it, in the same
    cgroups)."""
    iso = setup.isolation
    sc = iso.syscalls
    forker = setup.forker
    policy = forker.layout.policy
    if os.read(go_r, 1) != b"g":
        raise RuntimeError("no go")
    os.close(go_r)
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    gc.enable()

    def network() -> None:
        if policy.network == "public":
            ipv6 = iso.network.configure()
            for sock in iso.network.listeners(policy.egress_ports, ipv6=ipv6):
                sock.close()  # the product hands them to the host's proxy

    def mounts() -> None:
        socket.sethostname("localhost")
        sc.mount("proc", "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
        sc.mount("tmpfs", "/tmp", "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, f"size={policy.scratch_mb}m,mode=0700")
        os.chdir("/tmp")

    if mode == "nocaps":
        sc.prctl(sc.PR_SET_DUMPABLE, 1)  # its /proc files its own (not host root's), for the maps
        sc.check(sc.function("unshare")(sc.CLONE_NEWUSER | sc.CLONE_NEWPID | sc.CLONE_NEWNS | sc.CLONE_NEWIPC
                                        | sc.CLONE_NEWUTS | sc.CLONE_NEWCGROUP | sc.CLONE_NEWNET), "unshare")
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {TEMPLATE_UID} 1"),
                           ("gid_map", f"0 {TEMPLATE_UID} 1")):
            sc.write_file(f"/proc/self/{name}", text)
        first = os.fork()
        if first != 0:
            os.close(effect_fd)
            _, status = os.waitpid(first, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise RuntimeError(f"the context's PID 1 exited with {status}")
            return
        mounts()
        network()
    elif mode == "clone":  # already in its own user and PID namespaces
        sc.prctl(sc.PR_SET_DUMPABLE, 1)
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {TEMPLATE_UID} 1"),
                           ("gid_map", f"0 {TEMPLATE_UID} 1")):
            sc.write_file(f"/proc/self/{name}", text)
        sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS | sc.CLONE_NEWCGROUP | sc.CLONE_NEWNET)
        mounts()
        network()
    elif mode == "unotify":
        sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS | sc.CLONE_NEWCGROUP)
        mounts()
        # No uid map in it: the creator's capabilities there do not need one, and the files it
        # creates are on the file systems of T's namespace, where it is mapped.
        sc.check(sc.function("unshare")(sc.CLONE_NEWUSER | sc.CLONE_NEWNET), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
        network()
    else:
        sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS | sc.CLONE_NEWCGROUP | sc.CLONE_NEWNET)
        network()
        mounts()
    iso.identity.drop_identity(None, last_cap=forker.layout.last_cap, bounding_dropped=True)
    forker.filter.install()
    if sc.function("unshare")(sc.CLONE_NEWNS) == 0:  # the whole filter, on top of the template's
        raise RuntimeError("a context could unshare after its filter")
    module.effect()
    os.write(effect_fd, struct.pack("d", time.perf_counter()))


def _send_fd(sock: socket.socket, fd: int, command: bytes = b"s") -> None:
    sock.sendmsg([command], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])


def _recv_command(sock: socket.socket) -> tuple[bytes, int]:
    """One command byte and the descriptor sent with it (``-1`` without)."""
    command, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(4))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            return command, struct.unpack("i", data[:4])[0]
    return command, -1


class _Template:
    """The parent's side of variant ``b``."""

    def __init__(self, setup: _Setup, job: dict, *, mode: str = "caps") -> None:
        self.setup = setup
        self.mode = mode
        self.supervisor: Supervisor | None = None
        forker = setup.forker
        self.uid = forker.uids.take()
        self.memory = forker.memory.make()
        self.t0 = self.p = self.t1 = self.t = -1
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
        started = time.perf_counter()
        try:
            self._start(setup, job, theirs, up_r, up_w, down_r, down_w, started)
        except BaseException:
            self.close()
            raise
        self.known: set[int] = set()
        #: Per context: ms making its cgroups, asking T until it forked, placing it, go → effect.
        self.phases: list[tuple[float, float, float, float]] = []

    def _start(self, setup, job, theirs, up_r, up_w, down_r, down_w, started) -> None:
        self.t0 = os.fork()
        if self.t0 == 0:
            try:
                self.control.close()
                os.close(up_r)
                os.close(down_w)
                _template_process(setup, job, self.memory, theirs, up_w, down_r, self.mode)
            finally:
                os._exit(1)
        theirs.close()
        os.close(up_w)
        os.close(down_r)
        try:
            if os.read(up_r, 1) != b"u":
                raise RuntimeError("the template did not enter its user namespace")
            (self.p,) = _children(self.t0)
            for name, text in (("uid_map", f"{TEMPLATE_UID} {self.uid} 1"), ("setgroups", "deny"),
                               ("gid_map", f"{TEMPLATE_UID} {self.uid} 1")):
                setup.isolation.syscalls.write_file(f"/proc/{self.p}/{name}", text)
            os.write(down_w, b"m")
            if self.mode != "caps":
                command, listener = _recv_command(self.control)
                if command != b"l" or listener < 0:
                    raise RuntimeError("the template sent no seccomp listener")
                self.supervisor = Supervisor(listener, parents=self.mode == "nocaps")
            line = b""
            while not line.endswith(b"\n"):
                chunk = self.control.recv(4096)
                if not chunk:
                    raise RuntimeError("the template died before it was ready")
                line += chunk
            self.ready_ms = (time.perf_counter() - started) * 1000
            self.report = json.loads(line)
            (self.t1,) = _children(self.p)
            (self.t,) = _children(self.t1)
            if self.supervisor is not None and self.mode in ("unotify", "clone"):
                self.supervisor.allowed.add(self.t)  # its import is done and was checked
            self.setup_cpu_ms = self.cpu_seconds() * 1000
            self.host_uid = _host_uid(self.t)
        finally:
            os.close(up_r)
            os.close(down_w)

    def cpu_seconds(self) -> float:
        """CPU seconds of the template's processes so far: ``T`` with its reaped contexts (its own
        ``getrusage``), ``T0``, ``P`` and ``T1`` (``/proc``; they only wait)."""
        self.control.sendall(b"r")
        (t,) = struct.unpack("d", _read_socket(self.control, 8))
        return t + sum(proc_cpu.process_seconds(pid, children=False) for pid in (self.t1, self.p, self.t0))

    def ping_us(self, count: int = 20) -> float:
        """Median parent → ``T`` → parent round trip (µs) of one byte on the control socket."""
        trips = []
        for _ in range(count):
            started = time.perf_counter()
            self.control.sendall(b"p")
            if self.control.recv(1) != b"p":
                raise RuntimeError("the template did not answer")
            trips.append((time.perf_counter() - started) * 1e6)
        return statistics.median(trips)

    def context(self, *, check: bool = False) -> tuple[float, float, dict]:
        """One context: ``(first effect ms, µs from asking T until it had forked, checks)``."""
        forker = self.setup.forker
        write = self.setup.isolation.syscalls.write_file
        reader, writer = os.pipe()
        started = time.perf_counter()
        memory = forker.memory.make()
        frozen, frozen_fd = forker.freezer.make()
        made = time.perf_counter()
        checks: dict = {}
        try:
            asked = time.perf_counter()
            _send_fd(self.control, writer)
            os.close(writer)
            writer = -1
            if self.control.recv(1) != b"f":
                raise RuntimeError("the template did not fork")
            forked = (time.perf_counter() - asked) * 1e6
            (pid,) = _children(self.t) - self.known
            write(f"{memory}/cgroup.procs", str(pid))
            write(f"{frozen}/cgroup.procs", str(pid))
            if self.supervisor is not None:
                self.supervisor.allowed.add(pid)
            placed = time.perf_counter()
            if check:
                lines = _cgroup_lines(pid)
                checks = {
                    "context_in_its_memory_cgroup": memory.split("/sys/fs/cgroup/memory", 1)[-1] in lines,
                    "context_in_its_freezer_cgroup": frozen.split("/sys/fs/cgroup/freezer", 1)[-1] in lines,
                    "context_host_uid_is_pool_uid": _host_uid(pid) == self.uid,
                }
            if check:  # frozen before its go: the go reaches it, yet it runs nothing until thawed
                cgroups = self.setup.isolation.cgroups
                checks["context_freeze_confirmed"] = cgroups.freeze(frozen_fd, timeout=1.0)
            self.control.sendall(b"g")
            if check:
                checks["frozen_context_stayed_silent"] = not select.select([reader], [], [], 0.2)[0]
                cgroups.thaw(frozen_fd)
            (effect,) = struct.unpack("d", _read_exact(reader, 8))
            if self.control.recv(1) != b"x":
                raise RuntimeError("the context failed")
        finally:
            if self.supervisor is not None:
                self.supervisor.allowed.discard(pid if "pid" in locals() else -1)
            os.close(reader)
            if writer >= 0:
                os.close(writer)
            _remove_memory(forker.memory, memory)
            os.close(frozen_fd)
            forker.freezer.remove(frozen)
        self.phases.append(((made - started) * 1000, forked / 1000, (placed - asked) * 1000 - forked / 1000,
                            (effect - placed) * 1000))
        return (effect - started) * 1000, forked, checks

    def close(self) -> None:
        try:
            self.control.sendall(b"q")
        except OSError:
            pass
        self.control.close()
        if self.t0 > 0:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                if os.waitpid(self.t0, os.WNOHANG)[0]:
                    break
                time.sleep(0.01)
            else:
                for pid in (self.t1, self.p, self.t0):
                    if pid > 0:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                os.waitpid(self.t0, 0)
        if self.supervisor is not None:
            self.supervisor.close()
        time.sleep(0.05)
        _remove_memory(self.setup.forker.memory, self.memory)
        self.setup.forker.uids.give_back(self.uid)


def inner(variant: str, contexts: int, packages_dir: str, layer: str) -> dict:
    """One batch of ``variant`` in this process; the JSON figures."""
    setup = _Setup(packages_dir)
    template = None
    extra: dict = {}
    try:
        if variant in TEMPLATES:
            template = _Template(setup, _job("requests", layer), mode=TEMPLATES[variant])
            extra.update(template.report)
            extra["template_setup_ms"] = round(template.ready_ms, 2)
            extra["template_setup_cpu_ms"] = round(template.setup_cpu_ms, 2)
            extra["template_host_uid_is_pool_uid"] = template.host_uid == template.uid
            extra["roundtrip_us"] = round(template.ping_us(), 1)

            def one() -> float:
                return template.context()[0]
        else:
            job = _job("requests" if variant == "a_today_requests" else "stdlib", layer)

            def one() -> float:
                return _today_context(setup, job)

        for _ in range(_WARM_UP):
            one()
        if template is not None:
            extra.update(template.context(check=True)[2])
        time.sleep(_SETTLE_SECONDS)
        cpu_start = _rusage_seconds() + (template.cpu_seconds() if template else 0.0)
        kernel_start = proc_cpu.kernel_threads()
        wall_start = time.perf_counter()
        firsts, trips = [], []
        if template is not None:
            template.phases.clear()
        for _ in range(contexts):
            if template is not None:
                first, trip, _ = template.context()
                trips.append(trip)
            else:
                first = one()
            firsts.append(first)
        wall = time.perf_counter() - wall_start
        cpu = _rusage_seconds() + (template.cpu_seconds() if template else 0.0) - cpu_start
        time.sleep(_SETTLE_SECONDS)
        kernel = proc_cpu.kernel_thread_delta(kernel_start, proc_cpu.kernel_threads())
        idle_start = proc_cpu.kernel_threads()
        time.sleep(wall + _SETTLE_SECONDS)
        idle = proc_cpu.kernel_thread_delta(idle_start, proc_cpu.kernel_threads())
    finally:
        try:
            if template is not None:
                template.close()
        finally:
            setup.close()
    per = 1000 / contexts
    out = {
        "cpu_ms": round(cpu * per, 2),
        "kworker_net_ms": round((kernel["kworker"] - idle["kworker"]) * per, 2),
        "first_effect_p50_ms": round(statistics.median(firsts), 2),
        "first_effect_p90_ms": round(percentile(firsts, 0.9), 2),
        "wall_ms_per_context": round(wall * per, 2),
    }
    out["cpu_with_kworker_ms"] = round(out["cpu_ms"] + out["kworker_net_ms"], 2)
    if trips:
        out["template_fork_us"] = round(statistics.median(trips), 1)
        if template.supervisor is not None:
            out["notified_calls_continued_per_context"] = round(template.supervisor.continued / (contexts + _WARM_UP + 1), 2)
            out["notified_calls_refused"] = template.supervisor.refused
        names = ("cgroups_made", "asked_to_forked", "placed_in_cgroups", "go_to_effect")
        for index, name in enumerate(names):
            out[f"phase_{name}_ms"] = round(statistics.median(p[index] for p in template.phases), 3)
    out.update(extra)
    return out


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return str(os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contexts", type=int, default=30, help="contexts per batch")
    parser.add_argument("--inner", nargs=3, metavar=("VARIANT", "PACKAGES_DIR", "LAYER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        print(json.dumps(inner(args.inner[0], args.contexts, args.inner[1], args.inner[2])))
        return 0
    if os.geteuid() != 0:
        raise SystemExit("needs root (per-context cgroups and uids, as the product on a root host)")
    scratch = tempfile.mkdtemp(prefix="takohost-template-bench-")
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    errors: list[dict] = []
    load_before = _uptime()
    try:
        packages_dir, layer = make_layer(scratch)
        for index in range(args.rounds):
            for variant in VARIANTS:  # alternating: every variant once per round
                done = subprocess.run(
                    [sys.executable, "-m", "bench.template_bench", "--contexts", str(args.contexts),
                     "--inner", variant, packages_dir, layer],
                    capture_output=True, text=True, check=False, timeout=600,
                )
                if done.returncode != 0:
                    errors.append({"variant": variant, "round": index, "stderr": done.stderr[-3000:]})
                    continue
                runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {}
    for variant, results in runs.items():
        if results:
            numeric = [k for k, v in results[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            medians[variant] = {k: round(statistics.median(r[k] for r in results), 2) for k in numeric}
            medians[variant].update({k: v for k, v in results[-1].items() if isinstance(v, bool)})
    ratios = {}
    base = medians.get("c_today_stdlib")
    if base:
        for variant, short in (("b_template_requests", "b_over_c"), ("d_template_unotify_requests", "d_over_c"),
                               ("e_template_nocaps_requests", "e_over_c"), ("f_template_clone_requests", "f_over_c"),
                               ("a_today_requests", "a_over_c")):
            if variant in medians:
                ratios[short] = {
                    key: ratio(medians[variant][key], base[key])
                    for key in ("cpu_ms", "cpu_with_kworker_ms", "first_effect_p50_ms")
                }
    print(json.dumps({
        "rounds": args.rounds, "contexts_per_batch": args.contexts, "medians": medians, "ratios": ratios,
        "runs": runs, "errors": errors, "uptime_before": load_before, "uptime_after": _uptime(),
    }, indent=2))  # fmt: skip
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
