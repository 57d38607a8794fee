"""The network of a context with public egress (``isolation.network``): the route-netlink
requests packed once in the zygote, and :func:`network.configure` in a real new network
namespace (a forked process)."""

from __future__ import annotations

import os
import socket
import struct

from takohost.runtime.isolation import identity, network, syscalls


def test_the_link_up_request_sets_iff_up_on_the_loopback_and_asks_for_an_acknowledgement():
    message = network.link_up_message(seq=7)
    length, kind, flags, seq, port = struct.unpack_from("IHHII", message)
    assert (length, kind, seq, port) == (len(message), 16, 7, 0)  # RTM_NEWLINK
    assert flags == 0x1 | 0x4  # NLM_F_REQUEST | NLM_F_ACK
    family, _, index, ifi_flags, change = struct.unpack_from("BxHiII", message, 16)
    assert (family, index, ifi_flags, change) == (socket.AF_UNSPEC, network.LOOPBACK_INDEX, 1, 1)


def test_the_route_request_makes_the_whole_address_space_local_to_lo():
    message = network.local_route_message(socket.AF_INET6, seq=3)
    length, kind, flags, seq, _ = struct.unpack_from("IHHII", message)
    assert (length, kind, seq) == (len(message), 24, 3)  # RTM_NEWROUTE
    assert flags == 0x1 | 0x4 | 0x400 | 0x200  # request, ack, create, exclusive
    family, dst_len, _, _, table, protocol, scope, kind_of_route, _ = struct.unpack_from("BBBBBBBBI", message, 16)
    assert (family, dst_len, table, protocol, scope, kind_of_route) == (socket.AF_INET6, 0, 255, 4, 254, 2)
    attributes = message[28:]
    assert attributes == struct.pack("HHI", 8, 4, network.LOOPBACK_INDEX) + struct.pack("HHI", 8, 15, 255)


def _in_a_new_network_namespace(fn) -> int:
    """Run ``fn`` in a forked process in a network namespace of its own (in a user namespace of
    its own first when not root); its exit status."""
    pid = os.fork()
    if pid == 0:
        try:
            if not identity.host_is_root():
                syscalls.unshare(syscalls.CLONE_NEWUSER)
            syscalls.unshare(syscalls.CLONE_NEWNET)
            os._exit(fn())
        except BaseException:  # noqa: BLE001
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_configure_brings_lo_up_and_any_address_lands_on_a_listener_of_the_namespace():
    def check() -> int:
        ipv6 = network.configure()
        listeners = network.listeners((8080,), ipv6=ipv6)
        try:
            for address in ["203.0.113.9"] + (["2001:db8::9"] if ipv6 else []):
                with socket.create_connection((address, 8080), timeout=2):
                    accepted, _ = listeners[0].accept()
                    with accepted:
                        local = accepted.getsockname()[0]
                        if local.removeprefix("::ffff:") != address:
                            return 1
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
                client.sendto(b"q", ("198.51.100.1", network.DNS_PORT))
                if listeners[-1].recv(10) != b"q":
                    return 2
        finally:
            for sock in listeners:
                sock.close()
        return 0

    assert _in_a_new_network_namespace(check) == 0


def test_configure_again_in_the_same_namespace_is_refused_with_the_kernels_reason():
    def check() -> int:
        network.configure()
        try:
            network.configure()  # the routes exist: NLM_F_EXCL
        except network.NetworkUnavailable as exc:
            return 0 if "adding the local route (family 2): File exists" in str(exc) else 1
        return 2

    assert _in_a_new_network_namespace(check) == 0
