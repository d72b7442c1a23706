"""Same-machine partitions without RPC: reading a peer's mapped files directly.

When a rank serving partition ``q`` runs on this machine and mapped ``q``'s files
(the default, ``mmap=True``), this process can map the very same files (the page
cache holds one copy for both) and read ``q`` on its own mapping instead of a
TensorPipe round trip over loopback. The code that runs is what the owner would run
(its :class:`~pyg_dist.sampler._local.LocalSampler` on the same bytes), so results are
identical: edge lookups run the read-only callees here; a hop runs the owner's
``hop`` here, drawing its edges' original ids straight into the batch
(:mod:`pyg_dist.sampler._hop_round`), its response checked as an RPC response is;
feature rows are copied straight from ``q``'s mapped columns into the output, once
each column's row shape and dtype are checked against the output
(:func:`~pyg_dist.sampler._checks.check_direct_rows`; the copy itself checks rows).

It is chosen at the RPC join, per partition, only when it is safe:

* the owner is on the same machine (same boot, same network namespace: the
  emulated "machines" of network namespaces stay separate) and mapped its stores;
* the files at the owner's paths are the very files it mapped (device, inode,
  size, modification time) and unchanged;
* the owner's stores hold nothing but those files (no attribute ``put`` or
  modified, no extra edges). From then on the owner's stores refuse ``put``
  (:meth:`LocalFeatureStore.seal`), since a same-machine reader would not see it.

``PYG_DIST_DIRECT_READS=0`` or ``DistContext(direct_reads=False)`` turns it off;
the choice is logged (INFO, logger ``pyg_dist``) and kept in the group's
:class:`DirectReads` (:func:`of`), which this module owns: the RPC layer only runs a
callee here when asked (:meth:`RpcGroup.call_here`).
"""
from __future__ import annotations

import logging
import os
import socket
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from pyg_dist.rpc._context import DistContext
from pyg_dist.rpc._registry import reads_partition_only
from pyg_dist.rpc._runtime import RpcGroup
from pyg_dist.sampler._local import serving_objects
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._source import FileId, PartitionSource

log = logging.getLogger("pyg_dist")

ENV = "PYG_DIST_DIRECT_READS"


@dataclass(eq=False)
class DirectReads:
    """What one RPC group's process reads directly (one per group, :func:`of`).

    Args:
        infos (list): every rank's :func:`serving_info`, agreed after the join (empty
            in groups that exchanged none, e.g. sampler workers').
        chosen (dict): partition -> its owner's info, for the partitions read directly.
        served (dict): partition -> the objects serving it from this process's own
            mapping of its files (as its owner serves them).
        calls (int): reads served that way (hops, rows, lookups); for logs and stats.
    """
    infos: List[Dict[str, Any]] = field(default_factory=list)
    chosen: Dict[int, Dict[str, Any]] = field(default_factory=dict)
    served: Dict[int, Dict[str, Any]] = field(default_factory=dict)
    calls: int = 0

    def __contains__(self, part: object) -> bool:
        return part in self.served

    @property
    def parts(self) -> List[int]:
        """The partitions read directly, sorted."""
        return sorted(self.served)

    def sampler(self, part: int) -> Any:
        """The :class:`~pyg_dist.sampler._local.LocalSampler` of partition ``part``."""
        return self.served[part]["sampler"]

    def private_parts(self) -> List[int]:
        """Partitions whose owner holds more than its files (rows ``put`` there)."""
        return sorted({i["part"] for i in self.infos
                       if i.get("private") and i.get("part") is not None})


_READS: "weakref.WeakKeyDictionary[Any, DirectReads]" = weakref.WeakKeyDictionary()


def of(group: Any) -> DirectReads:
    """The :class:`DirectReads` of ``group`` (empty until :func:`attach` fills it)."""
    reads = _READS.get(group)
    if reads is None:
        reads = _READS[group] = DirectReads()
    return reads


def call_async(group: RpcGroup, rank: int, callee: str, *args: Any) -> Any:
    """``group.call_async(rank, callee, *args)``, run on this process's mapping when
    ``rank``'s partition is read directly and the callee reads only partition files."""
    reads = of(group)
    part = group.ctx.partition_of(rank, group.num_parts)
    if rank != group.rank and part in reads and reads_partition_only(callee):
        reads.calls += 1
        return group.call_here(callee, args, reads.served[part])
    return group.call_async(rank, callee, *args)


def enabled(ctx: DistContext) -> bool:
    """Whether direct same-machine reads are allowed for this job."""
    if ctx.direct_reads is not None:
        return bool(ctx.direct_reads)
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def machine_id() -> str:
    """This machine's identity: host name, boot and network namespace."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    try:
        netns = str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        netns = ""
    return f"{socket.gethostname()}/{boot}/{netns}"


def _source(value: Optional[PartitionSource]) -> Optional[Dict[str, Any]]:
    return None if value is None else asdict(value)


def _parse(value: Optional[Dict[str, Any]]) -> Optional[PartitionSource]:
    if value is None:
        return None
    return PartitionSource(value["root"], value["part"],
                           tuple(FileId(**f) for f in value["files"]))


def private_state(features: LocalFeatureStore, graph: LocalGraphStore) -> List[str]:
    """What the stores hold beyond their mapped files (empty: nothing)."""
    out = [f"attribute '{a}' of {g}" for g, attrs in features._tensors.items()
           for a in attrs if (g, a) not in features.from_file]
    out += [f"edges {key[0]} put into the graph store" for key in graph.memory.index]
    return out


def serving_info(ctx: DistContext, features: LocalFeatureStore,
                 graph: LocalGraphStore) -> Dict[str, Any]:
    """What this rank tells its peers at the join so they can decide."""
    return {"machine": machine_id(), "part": graph.part, "direct": enabled(ctx),
            "graph": _source(graph.source), "features": _source(features.source),
            "private": private_state(features, graph)}


def choose(ctx: DistContext, num_parts: int, infos: List[Dict[str, Any]]
           ) -> Dict[int, Dict[str, Any]]:
    """Partitions this rank may read directly: partition -> the owner's info."""
    mine = infos[ctx.rank] if ctx.rank < len(infos) else {}
    if not enabled(ctx) or not mine.get("graph") or not mine.get("features"):
        return {}
    own = ctx.partition_id(num_parts)
    chosen: Dict[int, Dict[str, Any]] = {}
    refused: set = set()
    for info in infos:
        part = info.get("part")
        if part is None or part == own or info.get("machine") != mine["machine"]:
            continue
        sources = [_parse(info.get("graph")), _parse(info.get("features"))]
        ok = (info.get("direct") and not info.get("private") and all(sources)
              and all(f.same_as_now() for s in sources for f in s.files))
        if not ok:
            refused.add(part)
        elif part not in chosen:
            chosen[part] = info
    return {p: i for p, i in chosen.items() if p not in refused}


def open_direct(infos: Dict[int, Dict[str, Any]]) -> Dict[int, Dict[str, Any]]:
    """Maps the chosen partitions' files: partition -> served objects (as the owner
    serves them); a partition whose files changed meanwhile is left to RPC."""
    out = {}
    for part, info in infos.items():
        graph_src, feat_src = _parse(info["graph"]), _parse(info["features"])
        graph = LocalGraphStore.from_partition(graph_src.root, part, mmap=True)
        features = LocalFeatureStore.from_partition(feat_src.root, part, mmap=True)
        if graph.source != graph_src or features.source != feat_src:
            log.info("pyg_dist: partition %d changed on disk while joining; reading it "
                     "over RPC", part)
            continue
        out[part] = serving_objects(features, graph)
    return out


def readers(ctx: DistContext, num_parts: int, infos: List[Dict[str, Any]]) -> List[int]:
    """Ranks of other partitions on this machine that may read this rank's files."""
    mine = infos[ctx.rank] if ctx.rank < len(infos) else {}
    if not mine.get("graph") or not mine.get("features") or not mine.get("direct") \
            or mine.get("private"):
        return []
    own = ctx.partition_id(num_parts)
    return [r for r, info in enumerate(infos) if info.get("part") not in (None, own)
            and info.get("machine") == mine["machine"] and info.get("direct")
            and info.get("graph") and info.get("features")]


def attach(group: RpcGroup, features: LocalFeatureStore, graph: LocalGraphStore,
           infos: List[Dict[str, Any]]) -> DirectReads:
    """After the join and the exchange of every rank's :func:`serving_info` (``infos``):
    maps the partitions to read directly and seals this rank's stores if same-machine
    peers may read its files. Returns the group's :class:`DirectReads`."""
    ctx, reads = group.ctx, of(group)
    if not ctx.is_distributed or len(infos) != ctx.world_size:
        return reads
    reads.infos = list(infos)
    reads.chosen = choose(ctx, group.num_parts, infos)
    reads.served = open_direct(reads.chosen)
    if reads.served:
        log.info("pyg_dist: rank %d reads partition(s) %s directly from their files on "
                 "this machine (%s=0 turns this off)", ctx.rank, reads.parts, ENV)
    peers = readers(ctx, group.num_parts, infos)
    if peers:
        features.seal(f"ranks {peers} on this machine read partition {graph.part}'s files "
                      f"directly and would not see it; put before the first loader, or set "
                      f"{ENV}=0")
    return reads


def reuse(group: RpcGroup, chosen: Dict[int, Dict[str, Any]]) -> DirectReads:
    """Maps the partitions another process of this rank chose (``chosen``, e.g. a
    sampler worker taking its trainer's choice) for ``group``."""
    reads = of(group)
    reads.chosen = dict(chosen)
    reads.served = open_direct(reads.chosen)
    return reads
