"""Tenant code of the isolation attacks (``tests/security/test_tenant_*.py``).

This file is not imported by the tests: its text is deployed as the ``main.py`` of a
WorkerVersion and runs inside the real host's sandbox, as any Space's code would. It is written
the way an attacker would write it: every attack tries every route it knows and returns what it
found as the step result (a JSON document), so the test can assert that each route failed.
Standard library only (that is all a sandbox has).

Search patterns for secrets arrive hex-encoded and are compiled into regular expressions of
one-character classes (``[p][o]…``), so the contiguous secret never exists in this process's
memory unless it leaked into it: a memory scan that finds it found a real leak.
"""

import contextlib
import ctypes
import errno
import importlib
import importlib.util
import json
import os
import platform
import re
import signal
import socket
import sys
import threading
import time

_libc = ctypes.CDLL(None, use_errno=True)
_SYSCALLS = {
    "x86_64": {"add_key": 248, "keyctl": 250, "process_vm_readv": 310, "pidfd_open": 434, "ptrace": 101},
    "aarch64": {"add_key": 217, "keyctl": 219, "process_vm_readv": 270, "pidfd_open": 434, "ptrace": 117},
}[platform.machine()]
KEY_SPEC = {"thread": -1, "process": -2, "session": -3, "user": -4, "user_session": -5}


def _err(exc):
    if isinstance(exc, OSError) and exc.errno:
        return f"{type(exc).__name__}:{errno.errorcode.get(exc.errno, exc.errno)}"
    return f"{type(exc).__name__}:{exc}"[:200]


def _errno_name():
    code = ctypes.get_errno()
    return errno.errorcode.get(code, str(code))


def _syscall(name, *args):
    """A raw system call; returns ``(result, errno name or None)``."""
    result = _libc.syscall(ctypes.c_long(_SYSCALLS[name]), *args)
    return result, (None if result >= 0 else _errno_name())


def _pattern(hex_needles):
    """A regex matching any of the hex-encoded needles, built without ever forming them."""
    alternatives = []
    for needle in hex_needles:
        pieces = []
        for i in range(0, len(needle), 2):
            byte = bytes([int(needle[i : i + 2], 16)])
            pieces.append(b"[" + (b"\\" + byte if byte in b"\\]^-[" else byte) + b"]")
        alternatives.append(b"".join(pieces))
    return re.compile(b"|".join(alternatives))


def _read(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit)


def _proc_pids():
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def scan_memory(pid, pattern, *, max_hits=20):
    """Search every readable mapping of ``pid`` for ``pattern`` through ``/proc/<pid>/mem``."""
    found = {"hits": [], "scanned": 0, "error": None}
    try:
        maps = _read(f"/proc/{pid}/maps").decode().splitlines()
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError as exc:
        found["error"] = _err(exc)
        return found
    try:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            name = fields[5] if len(fields) > 5 else ""
            if "r" not in fields[1] or name.startswith("[v"):
                continue
            address = start
            while address < end and len(found["hits"]) < max_hits:
                size = min((1 << 20) + 512, end - address)
                try:
                    chunk = os.pread(fd, size, address)
                except OSError:
                    break
                found["scanned"] += len(chunk)
                if pattern.search(chunk):
                    found["hits"].append(f"{name or 'anon'}@{address:#x}")
                address += 1 << 20
                del chunk
    finally:
        os.close(fd)
    return found


# ---------------------------------------------------------------------------------------------
# 1. credentials from /proc (environ, cmdline, memory) and the own environment


def attack_proc_environ(p):
    pattern = _pattern(p["needles"])
    listed = _proc_pids()
    hits, identities = [], {}
    for pid in listed:
        for name in ("environ", "cmdline"):
            try:
                if pattern.search(_read(f"/proc/{pid}/{name}")):
                    hits.append(f"{pid}/{name}")
            except OSError:
                pass
        with contextlib.suppress(OSError):
            status = _read(f"/proc/{pid}/status").decode()
            identities[str(pid)] = re.search(r"^Uid:\s+(\d+)", status, re.M).group(1)
    direct = {}
    for pid in p["host_pids"]:
        for name in ("environ", "cmdline", "status", "maps"):
            try:
                data = _read(f"/proc/{pid}/{name}")
                direct[f"{pid}/{name}"] = "READ" + ("+HIT" if pattern.search(data) else "")
            except OSError as exc:
                direct[f"{pid}/{name}"] = _err(exc)
        result, error = _syscall("pidfd_open", ctypes.c_int(pid), ctypes.c_uint(0))
        direct[f"{pid}/pidfd_open"] = error or "OPENED"
    memory = scan_memory("self", pattern)
    return {
        "listed": listed,
        "uids": identities,
        "hits": hits,
        "direct": direct,
        "self_memory_hits": memory["hits"],
        "self_memory_scanned": memory["scanned"],
        "environ": dict(os.environ),
        "proc1_environ": _read("/proc/1/environ").decode(errors="replace"),
        "proc_self_environ_hit": bool(pattern.search(_read("/proc/self/environ"))),
    }


# ---------------------------------------------------------------------------------------------
# 2. another instance's params from memory


def attack_victim(p):
    """Holds a secret param in memory until ``done_file`` appears (at most 40 s)."""
    held = [p["secret"], p["secret"].encode(), json.dumps(p)]
    with open(p["ready_file"], "w") as f:
        f.write(str(os.getpid()))
    deadline = time.time() + 40
    while time.time() < deadline and not os.path.exists(p["done_file"]):
        time.sleep(0.05)
    return {"held": len(held)}


def attack_memory_scanner(p):
    canary = bytes.fromhex(p["canary_hex"]) * 3  # the positive control: it must be found in self
    secret = _pattern([p["secret_hex"]])
    canary_pattern = _pattern([p["canary_hex"]])
    found = {}
    for pid in _proc_pids():
        found[str(pid)] = scan_memory(pid, secret)
    control = scan_memory("self", canary_pattern, max_hits=1)
    direct = {}
    for pid in p["host_pids"]:
        for name in ("mem", "maps"):
            try:
                fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY)
                try:
                    direct[f"{pid}/{name}"] = "OPENED:" + str(len(os.pread(fd, 4096, 0)))
                except OSError as exc:
                    direct[f"{pid}/{name}"] = "OPENED:" + _err(exc)
                finally:
                    os.close(fd)
            except OSError as exc:
                direct[f"{pid}/{name}"] = _err(exc)
        buffer = ctypes.create_string_buffer(4096)

        class IOVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

        local = IOVec(ctypes.cast(buffer, ctypes.c_void_p), 4096)
        remote = IOVec(0x400000, 4096)
        _, error = _syscall(
            "process_vm_readv",
            ctypes.c_int(pid),
            ctypes.byref(local),
            ctypes.c_ulong(1),
            ctypes.byref(remote),
            ctypes.c_ulong(1),
            ctypes.c_ulong(0),
        )
        direct[f"{pid}/process_vm_readv"] = error or "READ"
        _, error = _syscall("ptrace", ctypes.c_long(16), ctypes.c_long(pid), None, None)  # ATTACH
        direct[f"{pid}/ptrace_attach"] = error or "ATTACHED"
    return {
        "listed": _proc_pids(),
        "secret_scan": {pid: r["hits"] for pid, r in found.items()},
        "scanned": {pid: r["scanned"] for pid, r in found.items()},
        "scan_errors": {pid: r["error"] for pid, r in found.items() if r["error"]},
        "control_found": bool(control["hits"]) and len(canary) > 0,
        "direct": direct,
    }


# ---------------------------------------------------------------------------------------------
# 3. the host's packages


def _try_imports(names):
    out = {}
    for name in names:
        for key in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[key]
        importlib.invalidate_caches()
        try:
            module = importlib.import_module(name)
            out[name] = "IMPORTED:" + str(getattr(module, "__file__", None))
        except BaseException as exc:  # noqa: BLE001 - an attacker records every outcome
            out[name] = type(exc).__name__
    return out


def attack_imports(p):
    names = p["packages"]
    preloaded = sorted({m.split(".")[0] for m in sys.modules} & set(names))
    sys_path = {path: os.path.exists(path) for path in sys.path}
    before = _try_imports(names)
    for path in reversed(p["paths"]):
        sys.path.insert(0, path)
    sys.path_importer_cache.clear()
    after = _try_imports(names)
    exists = {path: os.path.exists(path) for path in p["paths"] + p["files"]}
    listing = {}
    for path in p["paths"]:
        try:
            listing[path] = sorted(os.listdir(path))
        except OSError as exc:
            listing[path] = _err(exc)
    by_file = {}
    for path in p["files"]:
        try:
            spec = importlib.util.spec_from_file_location("stolen", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            by_file[path] = "LOADED"
        except BaseException as exc:  # noqa: BLE001
            by_file[path] = type(exc).__name__
    return {
        "sys_path": sys_path,
        "preloaded": preloaded,
        "before": before,
        "after": after,
        "exists": exists,
        "listing": listing,
        "by_file": by_file,
    }


# ---------------------------------------------------------------------------------------------
# 4. the host's services


def _connect(family, kind, address, timeout=2.0):
    try:
        with socket.socket(family, kind) as s:
            s.settimeout(timeout)
            if kind == socket.SOCK_DGRAM and family != socket.AF_UNIX:
                s.sendto(b"PING\r\n", address)
                return "SENT"
            s.connect(address)
            return "CONNECTED"
    except OSError as exc:
        return _err(exc)


def attack_connect(p):
    out = {}
    for host, port in p["tcp"]:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        out[f"tcp {host}:{port}"] = _connect(family, socket.SOCK_STREAM, (host, port))
        out[f"udp {host}:{port}"] = _connect(family, socket.SOCK_DGRAM, (host, port))
    for path in p["unix"]:
        out[f"unix {path}"] = _connect(socket.AF_UNIX, socket.SOCK_STREAM, path)
    for name in p.get("abstract", []):
        out[f"abstract {name}"] = _connect(socket.AF_UNIX, socket.SOCK_STREAM, "\0" + name)
    try:
        out["interfaces"] = [name for _, name in socket.if_nameindex()]
    except OSError as exc:
        out["interfaces"] = _err(exc)
    for label, args in (
        ("raw_socket", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
        ("packet_socket", (socket.AF_PACKET, socket.SOCK_RAW, 0)),
        # vsock's ports are the machine's (shared with the host and other Spaces), not the netns's
        ("vsock_socket", (40, socket.SOCK_STREAM, 0)),
        # SOCK_SEQPACKET with protocol 0 is SCTP where the kernel has it (no Landlock port rules)
        ("inet_seqpacket", (socket.AF_INET, socket.SOCK_SEQPACKET, 0)),
        ("alg_socket", (38, socket.SOCK_SEQPACKET, 0)),
        ("netlink_uevents", (16, socket.SOCK_DGRAM, 15)),
    ):
        try:
            socket.socket(*args).close()
            out[label] = "OPENED"
        except OSError as exc:
            out[label] = _err(exc)
    try:  # bring the loopback up (SIOCSIFFLAGS, IFF_UP | IFF_RUNNING)
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x40))
        out["loopback_up"] = "UP"
    except OSError as exc:
        out["loopback_up"] = _err(exc)
    return out


# ---------------------------------------------------------------------------------------------
# 5. signals to the host


def attack_signals(p):
    out = {}
    for pid in p["host_pids"]:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, sig)
                out[f"kill {pid} {sig.name}"] = "SENT"
            except OSError as exc:
                out[f"kill {pid} {sig.name}"] = _err(exc)
        try:
            os.killpg(pid, signal.SIGKILL)
            out[f"killpg {pid}"] = "SENT"
        except OSError as exc:
            out[f"killpg {pid}"] = _err(exc)
    try:
        os.kill(-1, signal.SIGKILL)  # everything this identity may signal (never itself)
        out["kill -1"] = "SENT"
    except OSError as exc:
        out["kill -1"] = _err(exc)
    return out


# ---------------------------------------------------------------------------------------------
# 6. the host's files


def attack_write(p):
    out = {}
    for path in p["append"]:
        try:
            with open(path, "a") as f:
                f.write("\n# pwned by a tenant\n")
            out[f"append {path}"] = "WRITTEN"
        except OSError as exc:
            out[f"append {path}"] = _err(exc)
    for path in p["create"]:
        try:
            with open(path, "x") as f:
                f.write("pwned\n")
            out[f"create {path}"] = "WRITTEN"
        except OSError as exc:
            out[f"create {path}"] = _err(exc)
    for path in p["mutate"]:
        for label, action in (
            ("chmod", lambda path=path: os.chmod(path, 0o777)),
            ("utime", lambda path=path: os.utime(path, (0, 0))),
            ("rename", lambda path=path: os.rename(path, path + ".moved")),
            ("unlink", lambda path=path: os.unlink(path)),
            ("truncate", lambda path=path: os.truncate(path, 0)),
        ):
            try:
                action()
                out[f"{label} {path}"] = "DONE"
            except OSError as exc:
                out[f"{label} {path}"] = _err(exc)
    for path in p["mkdir"]:
        try:
            os.mkdir(path)
            out[f"mkdir {path}"] = "DONE"
        except OSError as exc:
            out[f"mkdir {path}"] = _err(exc)
    return out


# ---------------------------------------------------------------------------------------------
# 7. processes that outlive the context


def spawn_daemon(path):
    """``setsid`` + double fork: the grandchild ignores every catchable signal and appends a
    line to ``path`` every 50 ms, forever."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGUSR1):
                    signal.signal(sig, signal.SIG_IGN)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
                os.write(fd, f"uid {os.getuid()} pid {os.getpid()}\n".encode())
                while True:
                    os.write(fd, f"{time.time()}\n".encode())
                    time.sleep(0.05)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.time() + 10
    while time.time() < deadline:
        with contextlib.suppress(OSError), open(path) as f:
            if len(f.read().splitlines()) >= 3:
                return {"spawned": True}
        time.sleep(0.02)
    return {"spawned": False}


def attack_daemon(p):
    return spawn_daemon(p["file"])


def attack_daemon_then_loop(p):
    spawn_daemon(p["file"])
    while True:
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# 8. resource exhaustion


def attack_memory_bomb(p):
    """Allocate 4 GiB in one process: must raise (the attempt fails)."""
    hoard = bytearray(4 << 30)
    hoard[:: 1 << 12] = b"x" * len(hoard[:: 1 << 12])
    return {"allocated": len(hoard)}


def attack_memory_incremental(p):
    """Grab 64 MiB pieces until refused; report how far it got."""
    hoard = []
    try:
        while len(hoard) < 64:
            piece = bytearray(64 << 20)
            piece[:: 1 << 12] = b"x" * len(piece[:: 1 << 12])
            hoard.append(piece)
    except MemoryError:
        pass
    got = len(hoard) * 64
    del hoard
    return {"mib": got}


def attack_memory_spread(p):
    """Spread ``total_mib`` of touched memory over forked processes of ``each_mib`` (each under
    the per-process address-space limit) and hold it at once; report how much is held by children
    that touched all of theirs and are still alive at the end (the kernel may kill some)."""
    import select

    ready_r, ready_w = os.pipe()
    children = []
    for index in range(p["total_mib"] // p["each_mib"]):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                hoard = bytearray(p["each_mib"] << 20)
                hoard[:: 1 << 12] = b"x" * len(hoard[:: 1 << 12])
                os.write(ready_w, bytes([index]))
                time.sleep(30)
            finally:
                os._exit(0)
        children.append(pid)
    os.close(ready_w)
    wrote = set()
    deadline = time.time() + 40
    while len(wrote) < len(children) and time.time() < deadline:
        if not select.select([ready_r], [], [], 1.0)[0]:
            continue
        data = os.read(ready_r, 64)
        if not data:
            break
        wrote.update(data)
    time.sleep(1.0)  # an out-of-memory kill in progress lands
    alive = set()
    for index, pid in enumerate(children):
        with contextlib.suppress(OSError):
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                alive.add(index)
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    held = wrote & alive
    return {"held_mib": len(held) * p["each_mib"], "processes": len(children), "touched": len(wrote)}


def attack_fork_bomb(p):
    children, error = [], None
    while len(children) < 4096:
        try:
            pid = os.fork()
        except OSError as exc:
            error = _err(exc)
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    threads, thread_error = 0, None
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    stop = threading.Event()
    started = []
    while len(started) < 4096:
        try:
            t = threading.Thread(target=stop.wait, daemon=True)
            t.start()
            started.append(t)
        except RuntimeError as exc:
            thread_error = str(exc)[:100]
            break
    threads = len(started)
    stop.set()
    for t in started:
        t.join()
    return {"processes": len(children), "error": error, "threads": threads, "thread_error": thread_error}


def attack_open_files(p):
    fds, error = [], None
    with open("/tmp/many", "w"):
        pass
    while len(fds) < 100000:
        try:
            fds.append(os.open("/tmp/many", os.O_RDONLY))
        except OSError as exc:
            error = _err(exc)
            break
    count = len(fds)
    for fd in fds:
        os.close(fd)
    return {"opened": count, "error": error}


def attack_big_file(p):
    out = {}
    block = b"\0" * (1 << 20)
    for path in p["paths"]:
        written = 0
        try:
            with open(path, "wb") as f:
                for _ in range(100):
                    f.write(block)
                    f.flush()
                    written += 1
            out[path] = {"mib": written, "error": None}
        except OSError as exc:
            out[path] = {"mib": written, "error": _err(exc)}
        with contextlib.suppress(OSError):
            os.unlink(path)
    return out


# ---------------------------------------------------------------------------------------------
# 9. reading files of the host


def attack_read_files(p):
    out = {}
    for path in p["paths"]:
        try:
            out[path] = "READ:" + _read(path, 200).decode(errors="replace")
        except OSError as exc:
            out[path] = _err(exc)
        out[f"exists {path}"] = os.path.exists(path)
    for path in p.get("dirs", []):
        try:
            out[f"list {path}"] = "LISTED:" + ",".join(sorted(os.listdir(path))[:50])
        except OSError as exc:
            out[f"list {path}"] = _err(exc)
    return out


# ---------------------------------------------------------------------------------------------
# 10. identity and privileges, and the rest of an attacker's list


def attack_privileges(p):
    status = _read("/proc/self/status").decode()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    try:
        os.setuid(0)
        setuid = "BECAME ROOT"
    except OSError as exc:
        setuid = _err(exc)
    return {
        "status": {k: fields.get(k, "").strip() for k in (
            "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
            "Seccomp")},
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "setuid0": setuid,
        "fds": fds,
        "mountinfo": _read("/proc/self/mountinfo").decode(errors="replace").splitlines(),
        "hostname": socket.gethostname(),
    }


def _mount(source, target, fstype, flags=0):
    result = _libc.mount(source, target, fstype, ctypes.c_ulong(flags), None)
    return "MOUNTED" if result == 0 else _errno_name()


def _unshare_probe(name, flag):
    result = _libc.unshare(ctypes.c_int(flag))
    report = {"unshare": "UNSHARED" if result == 0 else _errno_name()}
    if result == 0 and name == "user":
        try:  # full capabilities in the new user namespace: what do they buy?
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            after = report["after"] = {}
            r = _libc.unshare(ctypes.c_int(0x00020000 | 0x40000000))
            after["unshare mount+net"] = "UNSHARED" if r == 0 else _errno_name()
            after["mount proc"] = _mount(b"proc", b"/tmp/m", b"proc")
            after["mount tmpfs"] = _mount(b"tmpfs", b"/tmp/m", b"tmpfs")
            after["remount / rw"] = _mount(None, b"/", None, 32 | 4096)
            after["remount /usr rw"] = _mount(None, b"/usr", None, 32 | 4096)
            after["umount /proc"] = "UNMOUNTED" if _libc.umount2(b"/proc", 2) == 0 else _errno_name()
            after["proc pids"] = _proc_pids()
        except BaseException as exc:  # noqa: BLE001
            report["after_error"] = _err(exc)
    return report


def attack_escape(p):
    """Mounts, namespaces, ptrace, /sys, /dev/shm, chroot, setns into /proc/1/ns."""
    out = {}
    os.makedirs("/tmp/m", exist_ok=True)
    out["mount tmpfs"] = _mount(b"tmpfs", b"/tmp/m", b"tmpfs")
    out["mount proc"] = _mount(b"proc", b"/tmp/m", b"proc")
    out["mount sysfs"] = _mount(b"sysfs", b"/tmp/m", b"sysfs")
    out["remount / rw"] = _mount(None, b"/", None, 32 | 4096)  # MS_REMOUNT | MS_BIND
    out["remount /usr rw"] = _mount(None, b"/usr", None, 32 | 4096)
    out["umount /proc"] = "UNMOUNTED" if _libc.umount2(b"/proc", 2) == 0 else _errno_name()
    try:
        os.chroot("/tmp")
        out["chroot"] = "DONE"
    except OSError as exc:
        out["chroot"] = _err(exc)
    for name, flag in (("user", 0x10000000), ("mount", 0x00020000), ("net", 0x40000000), ("pid", 0x20000000)):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # in a throw-away child: unshare changes the caller
            try:
                os.close(read_end)
                report = _unshare_probe(name, flag)
            except BaseException as exc:  # noqa: BLE001 - never let the child run on as the context
                report = {"unshare": "CHILD " + _err(exc)}
            try:
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        data = b""
        while chunk := os.read(read_end, 65536):
            data += chunk
        os.close(read_end)
        os.waitpid(pid, 0)
        out[f"unshare {name}"] = json.loads(data or b"{}")
    for ns in ("mnt", "pid", "net", "user", "ipc", "uts"):
        try:
            fd = os.open(f"/proc/1/ns/{ns}", os.O_RDONLY)
            r = _libc.setns(ctypes.c_int(fd), 0)
            out[f"setns {ns}"] = "JOINED" if r == 0 else _errno_name()
            os.close(fd)
        except OSError as exc:
            out[f"setns {ns}"] = _err(exc)
    # ptrace: a forked child attaches to pid 1 (ourselves: allowed, same context), then to pid 2+
    out["proc pids"] = _proc_pids()
    for path in ("/sys", "/sys/fs/cgroup", "/dev/shm", "/dev/mqueue", "/run", "/var/run", "/home", "/root",
                 "/work", "/proc/sys/kernel", "/sys/kernel"):
        try:
            out[f"list {path}"] = "LISTED:" + ",".join(sorted(os.listdir(path))[:20])
        except OSError as exc:
            out[f"list {path}"] = _err(exc)
    for path in ("/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
                 "/proc/self/uid_map", "/proc/self/attr/current", "/dev/urandom"):
        try:
            with open(path, "w") as f:
                f.write("0 0 1\n" if "uid_map" in path else "1\n")
            out[f"write {path}"] = "WRITTEN"
        except OSError as exc:
            out[f"write {path}"] = _err(exc)
    try:
        from multiprocessing import shared_memory

        shared_memory.SharedMemory(name="takohost-attack", create=True, size=4096).unlink()
        out["shm_open"] = "CREATED"
    except BaseException as exc:  # noqa: BLE001
        out["shm_open"] = _err(exc)
    return out


# ---------------------------------------------------------------------------------------------
# cross-context channels: abstract sockets, SysV IPC, keyrings


def _keyctl(*args):
    return _syscall("keyctl", *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])


def _keyring_listing(spec):
    """Describe the keys of keyring ``spec`` (a KEY_SPEC name)."""
    buffer = ctypes.create_string_buffer(4096)
    size, error = _keyctl(11, KEY_SPEC[spec], buffer, 4096)  # KEYCTL_READ
    if error:
        return {"error": error}
    serials = [int.from_bytes(buffer.raw[i : i + 4], sys.byteorder, signed=True) for i in range(0, size, 4)]
    keys = {}
    for serial in serials:
        description = ctypes.create_string_buffer(512)
        _, error = _keyctl(6, serial, description, 512)  # KEYCTL_DESCRIBE
        payload = ctypes.create_string_buffer(512)
        n, perror = _keyctl(11, serial, payload, 512)
        keys[str(serial)] = {
            "describe": error or description.value.decode(errors="replace"),
            "payload": perror or payload.raw[: max(0, min(n, 512))].decode(errors="replace"),
        }
    serial, error = _keyctl(0, KEY_SPEC[spec], 0)  # KEYCTL_GET_KEYRING_ID, no create
    return {"id": error or serial, "keys": keys}


def attack_channel_holder(p):
    """Open every cross-context channel it can and hold them until ``done_file`` appears."""
    tag = p["tag"]
    out = {}
    held = []
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + tag)
        s.listen(8)
        s.setblocking(False)
        held.append(s)
        out["abstract"] = "BOUND"
    except OSError as exc:
        out["abstract"] = _err(exc)
    try:
        d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        d.bind("\0" + tag + "-dgram")
        d.setblocking(False)
        held.append(d)
        out["abstract_dgram"] = "BOUND"
    except OSError as exc:
        out["abstract_dgram"] = _err(exc)
    key = p["ipc_key"]
    out["shmget"] = _libc.shmget(ctypes.c_int(key), ctypes.c_size_t(4096), ctypes.c_int(0o1000 | 0o666))
    out["msgget"] = _libc.msgget(ctypes.c_int(key), ctypes.c_int(0o1000 | 0o666))
    out["semget"] = _libc.semget(ctypes.c_int(key), ctypes.c_int(1), ctypes.c_int(0o1000 | 0o666))
    out["keyrings_before"] = {spec: _keyring_listing(spec) for spec in ("session", "user", "user_session")}
    payload = p["secret"].encode()
    for spec in ("session", "user", "user_session", "process"):
        serial, error = _syscall(
            "add_key", b"user", f"{tag}-{spec}".encode(), payload, ctypes.c_size_t(len(payload)),
            ctypes.c_int(KEY_SPEC[spec]),
        )
        out[f"add_key {spec}"] = error or serial
        if not error:  # let anyone who can find it read it
            _keyctl(5, serial, 0x3F3F3F3F)  # KEYCTL_SETPERM
    with open(p["ready_file"], "w") as f:
        f.write("ready")
    deadline = time.time() + 40
    accepted = 0
    while time.time() < deadline and not os.path.exists(p["done_file"]):
        with contextlib.suppress(OSError, IndexError):
            held[0].accept()[0].close()
            accepted += 1
        time.sleep(0.05)
    out["accepted"] = accepted
    return out


def attack_channel_seeker(p):
    tag = p["tag"]
    out = {}
    out["abstract"] = _connect(socket.AF_UNIX, socket.SOCK_STREAM, "\0" + tag)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as d:
            d.sendto(b"hello", "\0" + tag + "-dgram")
        out["abstract_dgram"] = "SENT"
    except OSError as exc:
        out["abstract_dgram"] = _err(exc)
    key = p["ipc_key"]
    for name, call in (
        ("shmget", lambda: _libc.shmget(ctypes.c_int(key), ctypes.c_size_t(0), ctypes.c_int(0))),
        ("msgget", lambda: _libc.msgget(ctypes.c_int(key), ctypes.c_int(0))),
        ("semget", lambda: _libc.semget(ctypes.c_int(key), ctypes.c_int(0), ctypes.c_int(0))),
    ):
        result = call()
        out[name] = "FOUND" if result >= 0 else _errno_name()
    out["keyrings"] = {spec: _keyring_listing(spec) for spec in ("session", "user", "user_session")}
    for spec in ("session", "user", "user_session", "process"):
        for where in ("session", "user", "user_session"):
            serial, error = _keyctl(10, KEY_SPEC[where], b"user", f"{tag}-{spec}".encode(), 0)  # SEARCH
            if not error:
                payload = ctypes.create_string_buffer(512)
                n, perror = _keyctl(11, serial, payload, 512)
                out[f"search {spec} in {where}"] = "FOUND:" + (perror or payload.raw[:n].decode())
            else:
                out[f"search {spec} in {where}"] = error
    # a named session keyring joined by name (KEYCTL_JOIN_SESSION_KEYRING)
    serial, error = _keyctl(1, f"{tag}-named".encode())
    out["join named"] = error or serial
    return out


def attack_keyring_leave(p):
    """Leave a key readable by anyone in the own user keyring (it outlives the context)."""
    payload = p["secret"].encode()
    serial, error = _syscall(
        "add_key", b"user", p["tag"].encode(), payload, ctypes.c_size_t(len(payload)),
        ctypes.c_int(KEY_SPEC["user"]),
    )
    if error:
        return {"add_key": error}
    _, perm_error = _keyctl(5, serial, 0x3F3F3F3F)  # KEYCTL_SETPERM: possessor/user/group/other all
    return {"add_key": serial, "setperm": perm_error or "SET", "uid": os.getuid()}


def attack_keyring_find(p):
    """Find keys of other identities through /proc/keys and read them by serial."""
    out = {"found": {}}
    try:
        lines = _read("/proc/keys").decode(errors="replace").splitlines()
    except OSError as exc:
        return {"proc_keys": _err(exc)}
    out["proc_keys_lines"] = len(lines)
    for line in lines:
        if p["tag"] not in line:
            continue
        serial = int(line.split()[0], 16)
        payload = ctypes.create_string_buffer(512)
        n, error = _keyctl(11, serial, payload, 512)
        out["found"][str(serial)] = error or payload.raw[:n].decode(errors="replace")
    out["uid"] = os.getuid()
    return out


def attack_watch(p):
    """Watch the read-only trees every context and the host share (the standard library, the
    SDK, ``/usr/bin``) for what others open, through inotify and fanotify."""
    out = {}
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    out["inotify_init1"] = "OPENED" if fd >= 0 else _errno_name()
    if fd >= 0:
        watched = libc.inotify_add_watch(fd, os.path.dirname(os.__file__).encode(), 0x20)  # IN_OPEN
        out["inotify_add_watch"] = "WATCHING" if watched >= 0 else _errno_name()
    fan = libc.fanotify_init(0, 0)
    out["fanotify_init"] = "OPENED" if fan >= 0 else _errno_name()
    return out


# ---------------------------------------------------------------------------------------------
# what the zygote left in the child's memory


def attack_host_state(p):
    """Look for the host's pids and the zygote's paths in what this child inherited: the frames
    below this one and every object the collector tracks of a class of the runtime's own
    modules or ``argparse``, three levels deep; ``threading``'s record of the main thread,
    ``tempfile``'s name sequence, ``sys.orig_argv``, ``/proc/self/cmdline``; and the kernel's
    view of its place (``/proc/self/cgroup``, ``mountinfo``, ``status``, ``stat``). The pids come masked (``pid ^ mask``)
    so that the attack's own parameters never match (its own host pid among them: its uid comes
    from a pool and no longer tells it)."""
    import gc
    import tempfile
    import threading

    mask = p["mask"]
    pids = set(p["masked_pids"])
    paths = _pattern(p["paths_hex"])
    hits, seen = [], set()

    def look(where, value, depth):
        if len(hits) >= 50:
            return
        if type(value) is int:
            if value ^ mask in pids:
                hits.append(where)
            return
        if type(value) is str:
            if paths.search(value.encode("utf-8", "surrogatepass")):
                hits.append(where)
            return
        if depth == 0 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, dict):
            for key, item in list(value.items())[:500]:
                look(f"{where}[{key!r:.40}]", key, depth - 1)
                look(f"{where}[{key!r:.40}]", item, depth - 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for i, item in enumerate(list(value)[:500]):
                look(f"{where}[{i}]", item, depth - 1)
        else:
            attributes = getattr(value, "__dict__", None)
            if isinstance(attributes, dict):
                look(f"{where}.__dict__", attributes, depth)

    frame, frames = sys._getframe(1), 0
    while frame is not None:
        look(f"frame {frame.f_code.co_name}", dict(frame.f_locals), 4)
        frame, frames = frame.f_back, frames + 1
    objects = 0
    for obj in gc.get_objects():
        module = getattr(type(obj), "__module__", "") or ""
        if module.startswith(("takohost.runtime", "__main__", "argparse")):
            objects += 1
            look(f"{type(obj).__name__} object", obj, 4)
    look("threading.main_thread().native_id", threading.main_thread().native_id, 1)
    look("tempfile._name_sequence", getattr(tempfile, "_name_sequence", None), 3)
    look("sys.orig_argv", list(sys.orig_argv), 2)
    with open("/proc/self/cmdline", "rb") as f:
        look("/proc/self/cmdline", f.read().decode("utf-8", "replace"), 1)
    # what the kernel shows of the context's place on the host: no host pid in it
    numbers = re.compile("(?<![0-9])(" + "|".join(str(m ^ mask) for m in pids) + ")(?![0-9])")
    for path in ("/proc/self/cgroup", "/proc/self/mountinfo", "/proc/self/status", "/proc/self/stat"):
        with open(path) as f:
            text = f.read()
        if numbers.search(text) or paths.search(text.encode()):
            hits.append(f"{path}: {text[:300]!r}")
    return {"hits": hits, "frames": frames, "objects": objects}


# ---------------------------------------------------------------------------------------------
# the workflow and the cron handler


ATTACKS = {name[len("attack_"):]: fn for name, fn in dict(globals()).items() if name.startswith("attack_")}


class Attack:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        params = event["params"]
        name = params["attack"]
        policy = params.get("retry")
        if name == "daemon_in_run":  # a daemon from replayed code (outside any effect) …
            spawn_daemon(params["file"])
        if name == "daemon_then_sleep":  # … or from an effect, then the context goes to sleep
            step.do("daemon", lambda: spawn_daemon(params["file"]))
            step.sleep("nap", 3600)
            return {"woke": True}
        effect = ATTACKS.get(name, lambda p: {"nothing": True})
        if policy:
            return step.do(name, lambda: effect(params), policy)
        return step.do(name, lambda: effect(params))


def scheduled(event, env, ctx):
    params = env.PARAMS
    found = {name: ATTACKS[name](params[name]) for name in params["attacks"]}
    with open(env.MARKER, "w") as f:
        json.dump(found, f)
