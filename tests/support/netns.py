"""An emulated cluster: K "machines" as Linux network namespaces on one host.

Each machine is a network namespace with its own loopback and one veth interface
holding an address from 198.18.0.0/15 (reserved for network benchmarks, RFC 2544);
the other ends of the veth pairs join a bridge in the host's namespace, which has no
address, so nothing is routed anywhere else. Optionally every link is rate-limited in
both directions with ``tc``'s ``tbf`` qdisc (``netem`` delays are not available here).
Processes started with :meth:`EmulatedCluster.popen` run inside a machine: its host name
still resolves to a loopback address (as on Debian and Ubuntu), which is exactly the
case pyg_dist's interface selection has to handle.

Needs root and ``ip``/``tc`` (iproute2); :func:`unavailable` says why not, in one line.
Everything created is removed on exit, also after a failure; names carry this
process's id so parallel runs do not collide, and :func:`remove_leftovers` removes
what a killed run left behind.

Example:
    >>> with EmulatedCluster(2, rate="1gbit") as cluster:
    ...     proc = cluster.popen(0, ["python", "-c", "print(1)"])
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from pyg_dist.rpc._network import NETWORK_ONLY_ENV

PREFIX = "pgd"  # every namespace, bridge and veth this module creates starts with it
SUBNET = "198.18.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30)


def unavailable() -> Optional[str]:
    """Why no emulated cluster can be made here (``None`` if it can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    name = f"{PREFIX}probe{os.getpid()}"
    probe = _ip("netns", "add", name, check=False)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()[:120]}"
    _ip("netns", "del", name, check=False)
    return None


def exit_on_sigterm() -> None:
    """Turns SIGTERM (``kill``, ``timeout``) into ``SystemExit`` in the main thread, so
    the ``with EmulatedCluster(...)`` blocks of a script tear their machines down."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def remove_leftovers() -> None:
    """Removes namespaces and links of this module left by runs that were killed."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(PREFIX) and not _owner_alive(name):
            _ip("netns", "del", name, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(PREFIX) and not _owner_alive(name):
            _ip("link", "del", name, check=False)


def _owner_alive(name: str) -> bool:
    """Whether the process whose id (mod 100000) ``name`` carries is still running."""
    tag = name[len(PREFIX):].split("x")[0]
    if not tag.isdigit():
        return False
    try:
        os.kill(int(tag), 0)
        return True
    except OSError:
        return False


class EmulatedCluster:
    """``size`` machines on a bridge; machine ``i`` has address ``198.18.0.<i+1>``.

    Args:
        size (int): number of machines (1-200).
        rate (str, optional): ``tc`` rate of every link in each direction (e.g.
            ``"1gbit"``, ``"10gbit"``); ``None``: unlimited.
    """

    def __init__(self, size: int, rate: Optional[str] = None) -> None:
        if not 1 <= size <= 200:
            raise ValueError(f"an emulated cluster has 1 to 200 machines, got {size}")
        self.size, self.rate = size, rate
        tag = f"{PREFIX}{os.getpid() % 100000}"
        self.bridge = f"{tag}x"
        self.namespaces = [f"{tag}x{i}" for i in range(size)]
        self._created: List[List[str]] = []  # undo commands, newest last

    def address(self, machine: int) -> str:
        return f"{SUBNET}.{machine + 1}"

    def __enter__(self) -> "EmulatedCluster":
        try:
            self._up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, args: Sequence[str], undo: Optional[Sequence[str]] = None) -> None:
        result = _ip(*args, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"emulated cluster: 'ip {' '.join(args)}' failed: "
                               f"{result.stderr.strip()}")
        if undo is not None:
            self._created.append(list(undo))

    def _tc(self, namespace: Optional[str], dev: str) -> None:
        cmd = ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", str(self.rate),
               "burst", "512kb", "latency", "100ms"]
        if namespace is not None:
            cmd = ["ip", "netns", "exec", namespace, *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise RuntimeError(f"emulated cluster: '{' '.join(cmd)}' failed: "
                               f"{result.stderr.strip()}")

    def _up(self) -> None:
        self._do(["link", "add", self.bridge, "type", "bridge"],
                 ["link", "del", self.bridge])
        self._do(["link", "set", self.bridge, "up"])
        for i, ns in enumerate(self.namespaces):
            inner, outer = f"{ns}i", f"{ns}o"
            self._do(["netns", "add", ns], ["netns", "del", ns])
            self._do(["netns", "exec", ns, "ip", "link", "set", "lo", "up"])
            self._do(["link", "add", inner, "type", "veth", "peer", "name", outer],
                     ["link", "del", outer])
            self._do(["link", "set", outer, "master", self.bridge])
            self._do(["link", "set", outer, "up"])
            self._do(["link", "set", inner, "netns", ns])
            self._do(["netns", "exec", ns, "ip", "addr", "add", f"{self.address(i)}/24",
                      "dev", inner])
            self._do(["netns", "exec", ns, "ip", "link", "set", inner, "up"])
            if self.rate:
                self._tc(None, outer)  # towards the machine
                self._tc(ns, inner)    # from the machine

    def close(self) -> None:
        """Removes everything created (idempotent; errors are ignored)."""
        while self._created:
            _ip(*self._created.pop(), check=False)

    def command(self, machine: int, argv: Sequence[str]) -> List[str]:
        """``argv`` run inside machine ``machine``."""
        return ["ip", "netns", "exec", self.namespaces[machine], *argv]

    def popen(self, machine: int, argv: Sequence[str], env: Optional[Dict[str, str]] = None,
              **kwargs) -> subprocess.Popen:
        """Starts ``argv`` inside machine ``machine`` (``subprocess.Popen`` keywords).

        pyg_dist's RPC is kept on the network (``PYG_DIST_RPC_NETWORK_ONLY=1``, unless
        ``env`` says otherwise): TensorPipe would otherwise move tensors between the
        machines through this host's memory, around their links."""
        return subprocess.Popen(self.command(machine, argv),
                                env={**os.environ, NETWORK_ONLY_ENV: "1", **(env or {})},
                                **kwargs)
