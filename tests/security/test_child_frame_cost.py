"""Attack: tenant code makes the host's worker parse a maximally nested frame.

The child's channel (descriptor 3) is the tenant's to write. A frame may be 8 MiB (a log frame of
256 lines with escapes needs most of it), and the host parsed any frame before checking its
shape: ``[[[…]]]`` of 8 MiB (4 million arrays) took about 5 s of CPU and 700 MB of memory in the
*host's* worker process, outside the sandbox's memory cgroup, and each replay context could do it
again. The host's reader now refuses a frame of more containers than one document can have
(``protocol.CHILD_MAX_CONTAINERS``) before parsing it: a protocol violation, at the cost of a
byte count.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time

import pytest

from tests.support import workflows
from workers.services import instance_common, instances

DEEP_FRAME = """
import os, struct
class Deep:
    def __init__(self, env): pass
    def run(self, event, step):
        n = (8 * 1024 * 1024 - 100) // 2
        body = b'{"op":"log","lines":[],"dropped":0,"x":' + b"[" * n + b"]" * n + b"}"
        os.write(3, struct.pack(">I", len(body)) + body)
        step.do("after", lambda: {"n": 1})
        return {"survived": True}
"""


@pytest.fixture(scope="module")
def db_url():
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_a_deeply_nested_frame_is_refused_without_parsing_it(monkeypatch, zygote, db_url, space_token):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    try:
        workflow = workflows.deploy(db_url, space=space, source=textwrap.dedent(DEEP_FRAME), class_name="Deep").workflow
        instances.create(
            space=space, workflow_uid=workflow, instance_id="deep-frame", params=instance_common.ABSENT, now=driver.clock()
        )
        base, peak, done = _rss_kb(), [0], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _rss_kb())
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        cpu = time.process_time()
        try:
            assert driver.run() == ["errored"]
        finally:
            done.set()
            sampler.join()
        cpu = time.process_time() - cpu
        status = instances.status(space=space, workflow_uid=workflow, instance_id="deep-frame")
        assert status["error"]["reason"] == "run_threw"
        assert "broke the host protocol" in status["error"]["message"]
        grown_mb = (peak[0] - base) / 1024
        assert grown_mb < 150, f"the host's worker grew by {grown_mb:.0f} MB parsing a child's frame"
        assert cpu < 2.5, f"the host's worker spent {cpu:.1f} s of CPU on a child's frame"
    finally:
        workflows.clear_timers(db_url)


def test_the_deepest_document_still_fits_a_childs_frame():
    from takohost.runtime import protocol

    levels = (1_048_576 - len('{"d":}')) // 2  # the deepest 1 MiB document (README "Documents")
    result = '{"d":' + "[" * levels + "]" * levels + "}"
    body = ('{"op":"effect_result","ok":true,"result":' + result + "}").encode()
    (message,) = protocol.FrameBuffer(max_containers=protocol.CHILD_MAX_CONTAINERS).feed(
        protocol._HEADER.pack(len(body)) + body
    )
    assert message["op"] == "effect_result"
    # a log frame of 256 lines of 4096 "[" each: a million brackets, all inside strings
    lines = json.dumps({"op": "log", "lines": [[0, "stdout", "[" * 4096]] * 256, "dropped": 0})
    assert len(protocol.decode_body(lines.encode(), max_containers=protocol.CHILD_MAX_CONTAINERS)["lines"]) == 256
