"""The sandbox's clear egress errors (takohost/runtime/egress_hook.py), in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, socket
from takohost.domain import egress
from takohost.runtime import egress_hook
rules = egress.SpaceRules(rules=(egress.parse_rule("*.blocked.test", action="deny"),
                                 egress.parse_rule("127.0.0.1:3000", action="allow")))
egress_hook.install(rules=rules, listen_ports=(80, 443, 3000), test_public=("127.0.0.5/32",))
out = {}
def attempt(label, fn):
    try:
        out[label] = "ok " + repr(fn())
    except Exception as exc:
        out[label] = f"{type(exc).__name__}: {exc}"
s = socket.socket(); s.settimeout(1)
attempt("private", lambda: s.connect(("10.0.0.5", 5432)))
attempt("metadata", lambda: socket.create_connection(("169.254.169.254", 80), timeout=1))
attempt("mapped", lambda: socket.socket(socket.AF_INET6).connect(("::ffff:127.0.0.1", 443)))
attempt("ex", lambda: socket.socket().connect_ex(("192.168.1.1", 443)))
attempt("name", lambda: socket.getaddrinfo("api.blocked.test", 443))
attempt("port", lambda: socket.socket().connect(("8.8.8.8", 22)))
# not refused by the wrapper (the kernel or the network decides):
attempt("own-loopback", lambda: socket.socket().connect_ex(("127.0.0.1", 1)))
attempt("exception", lambda: socket.socket().connect_ex(("127.0.0.1", 3000)))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(("127.0.0.1", 53)))
print(json.dumps(out))
"""


def test_refused_endpoints_raise_a_clear_error_before_any_packet() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(done.stdout)
    assert out["private"] == (
        "ConnectionRefusedError: [Errno 111] egress to 10.0.0.5:5432 refused: private address"
    )
    assert out["metadata"].endswith("egress to 169.254.169.254:80 refused: link-local address")
    assert out["mapped"].endswith("egress to 127.0.0.1:443 refused: loopback address")
    assert out["ex"] == "ok 111"
    assert out["name"] == "gaierror: [Errno -2] egress to api.blocked.test refused: denied by the rule '*.blocked.test'"
    assert out["port"].endswith("egress to 8.8.8.8:22 refused: port 22 is not allowed")
    assert out["own-loopback"] == "ok 111"  # the context's own loopback: the kernel answers
    assert out["exception"] in ("ok 111", "ok 0")  # allowed: whatever listens there answers
    assert out["udp"] == "ok None"
