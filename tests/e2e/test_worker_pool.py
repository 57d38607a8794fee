"""``takohost worker --concurrency N`` (default pool, docs/spec/host-features.md#hf-performance): N solo Celery processes
under one supervisor (``host_cli.worker_pool``). A crashed process is restarted; SIGTERM/SIGINT of
the supervisor stops every process, zygote and sandbox child; a SIGKILLed supervisor takes its
processes with it; a context killed with its process is finished by the next owner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.support import workflows

FAKE_SUPERVISOR = textwrap.dedent("""
    import sys
    from host_cli import worker_pool
    child = [sys.executable, "-c", (
        "import os, signal, sys, time\\n"
        "from host_cli import worker_pool\\n"
        "worker_pool.die_with_supervisor()\\n"
        "if sys.argv[2] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\\n"
        "time.sleep(600)\\n"), sys.argv[1], sys.argv[2]]
    raise SystemExit(worker_pool.Supervisor(command=child, concurrency=2, stop_timeout=1.0,
                                            poll_seconds=0.05).run())
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pids(directory) -> set[int]:
    return {int(name) for name in os.listdir(directory)}


def _supervisor(tmp_path, mode: str = "plain") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SUPERVISOR, str(tmp_path), mode],
                            stdin=subprocess.DEVNULL)
    workflows.wait_until(lambda: len(_pids(tmp_path)) == 2, timeout=30, message="two processes")
    return proc


def test_a_crashed_process_is_restarted_and_sigterm_stops_all(tmp_path):
    proc = _supervisor(tmp_path)
    try:
        first = _pids(tmp_path)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        workflows.wait_until(lambda: len(_pids(tmp_path)) == 3, timeout=30, message="restarted")
        running = {pid for pid in _pids(tmp_path) if _alive(pid)}
        assert victim not in running and len(running) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert not any(_alive(pid) for pid in _pids(tmp_path))
    finally:
        proc.kill()


def test_a_process_ignoring_sigterm_is_killed_after_the_stop_timeout(tmp_path):
    proc = _supervisor(tmp_path, "stubborn")
    try:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        assert not any(_alive(pid) for pid in _pids(tmp_path))
    finally:
        proc.kill()


def test_a_sigkilled_supervisor_takes_its_processes_with_it(tmp_path):
    proc = _supervisor(tmp_path)
    proc.kill()
    proc.wait(10)
    workflows.wait_until(lambda: not any(_alive(pid) for pid in _pids(tmp_path)), timeout=10,
                         message="processes died with the supervisor")


def _descendants(root: int) -> dict[int, str]:
    """pid → cmdline of every live descendant of ``root`` (direct children first)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(name)] = int(fields[1])
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                frontier.append(pid)
    return found


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


STEPS = """
import os, time
class Steps:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect(name):
            def run_it():
                with open(p["log"], "a") as f:
                    f.write(name + "\\n")
                if name == "b" and not os.path.exists(p["marker"]):
                    open(p["marker"], "w").close()
                    time.sleep(60)
                return {"step": name}
            return run_it
        return {n: step.do(n, effect(n))["step"] for n in ("a", "b", "c")}
"""


def test_solo_pool_kill_one_process_restart_finish_then_sigterm_leaves_nothing(tmp_path):
    with workflows.private_stack(workers=0) as stack:
        worker = stack.start_worker(pool="solo", concurrency=2)
        # 2 pool processes + the control-plane process (docs/spec/host-features.md#hf-newcomer) + the validation process
        workflows.wait_until(lambda: worker.log().count("ready.") >= 4, timeout=60, message="4 ready")
        tree = _descendants(worker.pid)
        solo = [pid for pid, cmd in tree.items()
                if "--supervised" in cmd and "--control-plane" not in cmd and "--validation" not in cmd]
        assert len([pid for pid, cmd in tree.items() if "--control-plane" in cmd]) == 1, tree
        assert len([pid for pid, cmd in tree.items() if "--validation" in cmd]) == 1, tree
        zygotes = [pid for top in solo for pid, cmd in _descendants(top).items()
                   if cmd.startswith("takohost-sandbox") and _parent(pid) == top]
        assert len(solo) == 2 and len(zygotes) == 2, tree
        deployed = workflows.deploy(stack.db_url, space=stack.space, source=STEPS, class_name="Steps")
        http = stack.instances(deployed.workflow)
        log, marker = tmp_path / "log", tmp_path / "marker"
        code, body = http.call("POST", body={"id": "x", "params": {"log": str(log), "marker": str(marker)}})
        assert code == 201, body
        workflows.wait_until(marker.exists, timeout=60, message="effect b running")
        import redis

        from core import config

        client = redis.Redis.from_url(config.load_settings().redis_url)
        [key] = [k for k in stack.redis_keys() if b":lease:" in k]
        owner = int(client.get(key).decode().split(":")[1])  # value: "{host}:{pid}:{nonce}"
        assert owner in solo
        os.kill(owner, signal.SIGKILL)
        workflows.wait_until(lambda: worker.log().count("ready.") >= 5, timeout=60, message="restarted")
        final = workflows.wait_until(
            lambda: (s := http.status("x"))["status"] == "complete" and s, timeout=90, message="complete")
        assert final["output"] == {"a": "a", "b": "b", "c": "c"}
        assert log.read_text().split() == ["a", "b", "b", "c"]
        everything = set(_descendants(worker.pid))
        assert len([p for p, c in _descendants(worker.pid).items() if "--supervised" in c]) == 4  # + control, validation
        os.kill(worker.pid, signal.SIGTERM)  # the supervisor alone, not its group
        assert worker.proc.wait(40) == 0
        time.sleep(0.5)
        assert not [pid for pid in everything if _alive(pid)]
