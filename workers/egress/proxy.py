"""The egress proxy: the one way out of every sandbox context (docs/spec/host-limits.md#hl-decisions "Egress";
docs/egress.md). One process per worker process, started by :mod:`workers.egress.client`.

A context with public egress lives in a network namespace of its own in which every address is
local (``takohost.runtime.isolation.network``): its child hands the host one TCP listener per egress port and
one UDP socket on port 53, all created inside that namespace, and the worker passes them here
with the context's Space (``open``). This process then

* accepts each TCP connection the tenant makes: the accepted socket's local address *is* the
  address and port the tenant connected to (after its own name resolution, through any redirect);
  it decides that endpoint with ``takohost.domain.egress.decide`` — the host's services and own
  addresses included — and either resets the connection (refused) or connects out from the host's
  namespace to exactly that address and relays bytes both ways;
* answers DNS queries (A and AAAA, over UDP) from the upstream resolver (``dnspython``, never the
  host's ``/etc/hosts``), keeping only addresses the Space may reach: a name that resolves to
  127.0.0.1 or a private address gets no answer, and a name that changes its answer between two
  look-ups gains nothing, since every connection is decided on the address connected to;
* reports every connection (name, address, port, bytes each way, seconds, or the refusal and its
  reason) and every refused look-up to the worker, which keeps them with the instance's logs as
  ``host`` lines and counts them per Space.

Control protocol (one Unix stream connection per worker process, frames of
``takohost.runtime.protocol``): ``{"op": "open", "context": K, "space": S}`` with the descriptors
as SCM_RIGHTS; ``{"op": "close", "context": K}`` → the listeners are closed, open relays aborted,
their records sent, then ``{"op": "closed", "context": K}``. Records: ``{"op": "connection" |
"lookup", "context": K, ...}``. EOF on the control pipe (``--control-fd``) stops the process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import ipaddress
import logging
import os
import signal
import socket
import sys
import time
from collections import OrderedDict
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.resolver
import dns.rrset

from takohost.domain import egress
from takohost.runtime import protocol
from workers.egress import config as egress_config

log = logging.getLogger("takohost.egress")

#: Connections one context may have open at once through the proxy.
MAX_CONNECTIONS = 64
#: Look-ups one context may have in flight at once.
MAX_LOOKUPS = 32
CONNECT_TIMEOUT_SECONDS = 10.0
LOOKUP_TIMEOUT_SECONDS = 5.0
#: Longest a DNS answer is cached by the tenant (seconds).
MAX_TTL_SECONDS = 300
#: Names remembered per context (address → the name it was resolved from).
MAX_NAMES = 1024
_CHUNK = 1 << 16


class _Context:
    """One context's listeners, relays and the names its look-ups returned."""

    def __init__(self, key: str, policy: egress.Policy, server: Server, client: _Client) -> None:
        self.key = key
        self.policy = policy
        self.server = server
        self.client = client
        self.servers: list[asyncio.base_events.Server] = []
        self.transports: list[asyncio.BaseTransport] = []
        self.relays: set[asyncio.Task] = set()
        self.lookups = 0
        self.names: OrderedDict[egress.Address, str] = OrderedDict()
        self.closed = False

    def remember(self, address: egress.Address, name: str) -> None:
        self.names[address] = name
        self.names.move_to_end(address)
        while len(self.names) > MAX_NAMES:
            self.names.popitem(last=False)

    async def close(self) -> None:
        self.closed = True
        for server in self.servers:
            server.close()
        for transport in self.transports:
            transport.close()
        relays = list(self.relays)
        for task in relays:
            task.cancel()
        if relays:
            await asyncio.gather(*relays, return_exceptions=True)


class _Client:
    """One worker process's connection: its frames, its received descriptors, its contexts."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = protocol.FrameBuffer()
        self.fds: list[int] = []
        self.closed = False

    def send(self, message: dict[str, Any]) -> None:
        """Write one record (small frames on a local socket: the write does not stall)."""
        if self.closed:
            return
        try:
            self.sock.setblocking(True)
            self.sock.sendall(protocol.encode_frame(message))
        except OSError:
            self.closed = True
        finally:
            with contextlib.suppress(OSError):
                self.sock.setblocking(False)


class Server:
    """The proxy's event loop state: the listening socket, its clients, contexts by key."""

    def __init__(self, listener: socket.socket, config: egress_config.EgressConfig) -> None:
        self.listener = listener
        self.config = config
        self.services = egress_config.host_services()
        self.own = egress_config.own_addresses()
        self.contexts: dict[tuple[int, str], _Context] = {}
        self.stopped = asyncio.Event()
        nameservers = [host for host, _ in config.resolvers]
        self.resolver = dns.asyncresolver.Resolver(configure=not nameservers)
        if nameservers:
            self.resolver.nameservers = nameservers
            self.resolver.port = config.resolvers[0][1]
        self.resolver.lifetime = LOOKUP_TIMEOUT_SECONDS
        self.resolver.search = []
        self.resolver.use_search_by_default = False

    # -- control ---------------------------------------------------------------------------
    def accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        client = _Client(sock)
        asyncio.get_running_loop().add_reader(sock.fileno(), self.readable, client)

    def readable(self, client: _Client) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(client.sock, 1 << 16, 64)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        client.fds.extend(fds)
        messages: list[dict[str, Any]] = []
        if data:
            try:
                messages = client.buffer.feed(data)
            except protocol.ProtocolError:
                data = b""
        if not data:
            self._drop(client)
            return
        for message in messages:
            op = message.get("op")
            if op == "open":
                count = message.get("descriptors")
                count = count if type(count) is int and 0 <= count <= len(client.fds) else len(client.fds)
                fds, client.fds = client.fds[:count], client.fds[count:]
                asyncio.ensure_future(self.open(client, message, fds))
            elif op == "close":
                asyncio.ensure_future(self.close(client, str(message.get("context"))))

    def _drop(self, client: _Client) -> None:
        """A worker process went away: its contexts are over."""
        client.closed = True
        asyncio.get_running_loop().remove_reader(client.sock.fileno())
        for fd in client.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for key in [k for k in self.contexts if k[0] == id(client)]:
            asyncio.ensure_future(self.contexts.pop(key).close())
        client.sock.close()

    async def open(self, client: _Client, message: dict[str, Any], fds: list[int]) -> None:
        key, space = str(message.get("context")), str(message.get("space"))
        policy = self.config.policy(space, services=self.services, own=self.own)
        context = _Context(key, policy, self, client)
        old = self.contexts.pop((id(client), key), None)
        if old is not None:
            await old.close()
        self.contexts[(id(client), key)] = context
        loop = asyncio.get_running_loop()
        for fd in fds:
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            try:
                if sock.type == socket.SOCK_STREAM:
                    server = await asyncio.start_server(functools.partial(self._accepted, context), sock=sock)
                    context.servers.append(server)
                else:
                    transport, _ = await loop.create_datagram_endpoint(functools.partial(_Dns, context), sock=sock)
                    context.transports.append(transport)
            except OSError:
                log.exception("could not serve a descriptor of context %s", key)
                sock.close()

    def _accepted(self, context: _Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track(context, self.relay(context, reader, writer))

    def _track(self, context: _Context, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        context.relays.add(task)
        task.add_done_callback(context.relays.discard)

    async def close(self, client: _Client, key: str) -> None:
        context = self.contexts.pop((id(client), key), None)
        if context is not None:
            await context.close()
        client.send({"op": "closed", "context": key})

    # -- TCP ---------------------------------------------------------------------------------
    async def relay(self, context: _Context, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened = time.monotonic()
        sock = writer.get_extra_info("socket")
        host, port = sock.getsockname()[:2]
        address = egress.unwrap(ipaddress.ip_address(host.split("%")[0]))
        name = context.names.get(address)
        record = {
            "op": "connection",
            "context": context.key,
            "opened": opened,
            "name": name,
            "address": str(address),
            "port": port,
            "sent": 0,
            "received": 0,
        }
        verdict = egress.decide(context.policy, address=address, port=port, name=name)
        if verdict.allowed and len(context.relays) > MAX_CONNECTIONS:
            verdict = egress.Verdict(False, f"more than {MAX_CONNECTIONS} connections at once")
        if not verdict.allowed:
            _reset(writer)
            context.client.send({**record, "outcome": "refused", "reason": verdict.reason, "seconds": 0.0})
            return
        context.client.send({"op": "opened", "context": context.key})
        try:
            out_reader, out_writer = await asyncio.wait_for(
                asyncio.open_connection(str(address), port), CONNECT_TIMEOUT_SECONDS
            )
        except (TimeoutError, OSError) as exc:
            _reset(writer)
            reason = "timed out" if isinstance(exc, asyncio.TimeoutError) else (exc.strerror or str(exc)).lower()
            context.client.send({**record, "outcome": "failed", "reason": reason, "seconds": time.monotonic() - opened})
            return
        counts = [0, 0]
        try:
            await asyncio.gather(_pump(reader, out_writer, counts, 0), _pump(out_reader, writer, counts, 1))
        except asyncio.CancelledError:
            pass
        finally:
            for w in (writer, out_writer):
                with contextlib.suppress(Exception):
                    if context.closed:
                        w.transport.abort()
                    else:
                        w.close()
            context.client.send(
                {
                    **record,
                    "outcome": "ok",
                    "sent": counts[0],
                    "received": counts[1],
                    "seconds": time.monotonic() - opened,
                }
            )

    # -- DNS ---------------------------------------------------------------------------------
    async def answer(self, context: _Context, data: bytes, peer: Any, transport: asyncio.DatagramTransport) -> None:
        try:
            query = dns.message.from_wire(data)
        except Exception:  # noqa: BLE001 - anything the tenant sends
            return
        if len(query.question) != 1 or query.opcode() != 0:
            return
        response = dns.message.make_response(query)
        response.flags |= dns.flags.RA
        question = query.question[0]
        qname = question.name.to_text(omit_final_dot=True).lower()
        rdtype = question.rdtype
        if question.rdclass != dns.rdataclass.IN or rdtype not in (dns.rdatatype.A, dns.rdatatype.AAAA):
            response.set_rcode(dns.rcode.REFUSED)
        elif context.lookups >= MAX_LOOKUPS:
            response.set_rcode(dns.rcode.SERVFAIL)
        else:
            verdict = egress.decide_name(context.policy, name=qname)
            if not verdict.allowed:
                response.set_rcode(dns.rcode.NXDOMAIN)
                self._lookup(context, qname, verdict.reason)
            else:
                context.lookups += 1
                try:
                    await self._resolve(context, qname, question, response)
                finally:
                    context.lookups -= 1
        if not context.closed:
            with contextlib.suppress(OSError):
                transport.sendto(response.to_wire(), peer)

    async def _resolve(self, context: _Context, qname: str, question: Any, response: Any) -> None:
        try:
            answer = await self.resolver.resolve(
                qname + ".", question.rdtype, search=False, raise_on_no_answer=False
            )
        except dns.resolver.NXDOMAIN:
            response.set_rcode(dns.rcode.NXDOMAIN)
            return
        except (dns.exception.DNSException, OSError) as exc:
            response.set_rcode(dns.rcode.SERVFAIL)
            self._lookup(context, qname, f"the resolver failed: {type(exc).__name__}", outcome="failed")
            return
        if answer.rrset is None:
            return
        kept, refused = [], []
        for rdata in answer.rrset:
            address = egress.unwrap(ipaddress.ip_address(rdata.address))
            verdict = egress.decide(context.policy, address=address, port=None, name=qname)
            if verdict.allowed:
                kept.append(rdata)
                context.remember(address, qname)
            else:
                refused.append(f"{address} ({verdict.reason})")
        if refused:
            self._lookup(context, qname, "resolves to " + ", ".join(refused))
        if kept:
            ttl = min(answer.rrset.ttl, MAX_TTL_SECONDS)
            rrset = dns.rrset.from_rdata_list(question.name, ttl, kept)
            response.answer.append(rrset)

    def _lookup(self, context: _Context, name: str, reason: str, *, outcome: str = "refused") -> None:
        context.client.send(
            {
                "op": "lookup",
                "context": context.key,
                "opened": time.monotonic(),
                "name": name,
                "outcome": outcome,
                "reason": reason,
            }
        )


class _Dns(asyncio.DatagramProtocol):
    def __init__(self, context: _Context) -> None:
        self.context = context
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.transport is not None and not self.context.closed:
            self.context.server._track(
                self.context, self.context.server.answer(self.context, data, addr, self.transport)
            )


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: list[int], index: int) -> None:
    try:
        while True:
            data = await reader.read(_CHUNK)
            if not data:
                break
            counts[index] += len(data)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0): the tenant's next read fails at once."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.transport.abort()


async def _serve(listener: socket.socket, control_fd: int, config: egress_config.EgressConfig) -> None:
    server = Server(listener, config)
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    loop.add_reader(listener.fileno(), server.accept)
    os.set_blocking(control_fd, False)

    def control() -> None:
        try:
            if os.read(control_fd, 4096):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        server.stopped.set()

    loop.add_reader(control_fd, control)
    loop.add_signal_handler(signal.SIGTERM, server.stopped.set)
    await server.stopped.wait()
    for key in list(server.contexts):
        await server.contexts.pop(key).close()


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.egress.proxy --socket PATH --control-fd N --ready-fd N``: listen on
    ``PATH`` (in a directory only the host's user can enter) and serve until EOF of the control
    pipe or SIGTERM; ``ready`` (or ``error <reason>``) is written on the ready pipe."""
    parser = argparse.ArgumentParser(prog="workers.egress.proxy")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: nothing reads this process's memory
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the worker; EOF stops us
    try:
        config = egress_config.load()
    except ValueError as exc:
        os.write(args.ready_fd, f"error {exc}\n".encode())
        return 78
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.socket)
    os.chmod(args.socket, 0o600)
    listener.listen(64)
    os.write(args.ready_fd, b"ready\n")
    os.close(args.ready_fd)
    try:
        asyncio.run(_serve(listener, args.control_fd, config))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["MAX_CONNECTIONS", "Server", "main"]
