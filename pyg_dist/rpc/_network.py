"""Which network interface a job listens on: the one that routes to ``MASTER_ADDR``.

gloo and TensorPipe pick their listening address from the host name by default. Where
the host name resolves to a loopback address (as Debian and Ubuntu set it up), peers on
other machines are told ``127.0.0.1`` and cannot connect. Unless the user chose
interfaces (``GLOO_SOCKET_IFNAME`` / ``TP_SOCKET_IFNAME``), pyg_dist sets both to the
interface whose address the kernel would use to reach ``MASTER_ADDR``, so listeners are
on that interface only, and reachable from the other machines.
"""
from __future__ import annotations

import fcntl
import logging
import os
import socket
import struct
from typing import Any, Dict, Optional

log = logging.getLogger("pyg_dist")

GLOO_ENV, TP_ENV = "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"
_SIOCGIFADDR = 0x8915


def source_address(host: str) -> Optional[str]:
    """The local IPv4 address used to reach ``host`` (no packet is sent), or ``None``."""
    try:
        addr = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((addr, 9))  # UDP connect only picks a route
            return str(sock.getsockname()[0])
    except OSError:
        return None


def interface_of(address: str) -> Optional[str]:
    """The name of the interface holding IPv4 ``address`` (Linux), or ``None``."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in names:
            try:
                raw = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                  struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on this interface
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def choose_interfaces(master_addr: str) -> Optional[str]:
    """Sets ``GLOO_SOCKET_IFNAME`` and ``TP_SOCKET_IFNAME`` to the interface reaching
    ``master_addr`` unless the user set them (one set by the user is used for both).

    Returns:
        the interface chosen or kept, or ``None`` when none could be found (the
        libraries' own choice then applies).
    """
    chosen = os.environ.get(GLOO_ENV) or os.environ.get(TP_ENV)
    if chosen is None:
        address = source_address(master_addr)
        chosen = interface_of(address) if address else None
        if chosen is None:
            log.info("pyg_dist: no interface found that reaches %s; gloo and TensorPipe "
                     "choose their own", master_addr)
            return None
        log.info("pyg_dist: listening on %s (%s), the interface that reaches %s",
                 chosen, address, master_addr)
    os.environ.setdefault(GLOO_ENV, chosen)
    os.environ.setdefault(TP_ENV, chosen)
    return chosen


NETWORK_ONLY_ENV = "PYG_DIST_RPC_NETWORK_ONLY"
SHM_ENV = "PYG_DIST_RPC_SHM"


def _flag(name: str) -> bool:
    flag = os.environ.get(name, "0").strip().lower()
    if flag in ("", "0", "false", "no"):
        return False
    if flag not in ("1", "true", "yes"):
        raise ValueError(f"{name} must be 0 or 1, got {flag!r}")
    return True


def tensorpipe_options() -> Dict[str, Any]:
    """The transports and channels pyg_dist's TensorPipe agents use.

    - Default: the TCP transport (``uv``), also between processes of one machine, and
      TensorPipe's channels (large tensors between processes of one machine still move by
      cross-memory attach where the kernel allows it). TensorPipe's shared-memory
      transport is left out: a thread of every process that has it polls its ring
      buffers without ever sleeping, so each trainer and sampler worker kept one core
      busy even while idle (measured: 5.0 s of CPU per 5 s idle, 0.04 s with TCP).
    - ``PYG_DIST_RPC_SHM=1``: TensorPipe's defaults, shared memory included (lower
      latency per message where cores are to spare).
    - ``PYG_DIST_RPC_NETWORK_ONLY=1``: TCP only, tensors too, so emulated machines on one
      host (:mod:`tests.support.netns`) use their rate-limited links (shared memory or
      cross-memory attach would cross network namespaces)."""
    network_only, shm = _flag(NETWORK_ONLY_ENV), _flag(SHM_ENV)
    if network_only and shm:
        raise ValueError(f"{NETWORK_ONLY_ENV}=1 and {SHM_ENV}=1 contradict each other: "
                         f"set one of them")
    if network_only:
        return {"_transports": ["uv"], "_channels": ["basic"]}
    return {} if shm else {"_transports": ["uv"]}
