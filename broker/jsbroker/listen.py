"""Listening sockets as Go's `net.Listen("tcp", ...)` makes them for nats-server.

Go listens on the wildcard hosts ("0.0.0.0", "::", "") with one dual-stack IPv6 socket, so nats-server on its
default host answers on [::1] too. asyncio's create_server sets IPV6_V6ONLY and would take IPv4 only, so the
socket is made here; where the machine has no IPv6, the wildcard is IPv4's as before.
"""

from __future__ import annotations

import ipaddress
import socket

WILDCARDS = ("0.0.0.0", "::", "")


def dual_stack_socket(host: str, port: int, backlog: int = 1024) -> socket.socket | None:
    """A bound, listening dual-stack socket for a wildcard `host`; None for any other host (or without IPv6)."""
    if host not in WILDCARDS or not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def plain_ip(address: str) -> str:
    """An IPv4 peer of a dual-stack socket ("::ffff:127.0.0.1") as Go shows it ("127.0.0.1")."""
    return address[7:] if address.startswith("::ffff:") and "." in address else address


def interface_addresses() -> list[str]:
    """Every address of every interface, interface by interface (IPv4 first), as Go's net.Interfaces: what a
    wildcard listener answers on (nats-server's ports file lists them). Linux; elsewhere the loopback only."""
    import fcntl
    import struct

    v6: dict[str, list[str]] = {}
    try:
        with open("/proc/net/if_inet6") as table:
            for line in table:
                fields = line.split()
                v6.setdefault(fields[5], []).append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    except OSError:
        pass
    found: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: the interface's IPv4 address
                raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                found.append(socket.inet_ntoa(raw[20:24]))
            except OSError:
                pass
            found += sorted(v6.get(name, []), key=lambda a: a.startswith("fe80:"))  # link-local last, as Go's
    return found or ["127.0.0.1"]


def advertised(address: str, port: int) -> tuple[str, int]:
    """nats-server's client_advertise: "host", "host:port" or "[v6]:port"; without a port, the listener's.
    ValueError for what Go's net.SplitHostPort refuses ("a:b:c": too many colons)."""
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            raise ValueError(f"address {address}: give [v6 address]:port")
        return host, int(rest[1:]) if rest else port
    host, sep, text = address.partition(":")
    if ":" in text:
        raise ValueError(f"address {address}: too many colons in address")
    if sep and not text.isdigit():
        raise ValueError(f"address {address}: invalid port {text!r}")
    return host, int(text) if sep else port


def host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: IPv6 addresses in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
