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
the choice is logged (INFO, logger ``pyg_dist``) and kept in ``group.direct``.
"""
from __future__ import annotations

import logging
import os
import socket
from dataclasses import asdict
from typing import Any, Dict, List, Optional

from pyg_dist.rpc._context import DistContext
from pyg_dist.sampler._local import serving_objects
from pyg_dist.store import LocalFeatureStore, LocalGraphStore
from pyg_dist.store._source import FileId, PartitionSource

log = logging.getLogger("pyg_dist")

ENV = "PYG_DIST_DIRECT_READS"


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


def attach(group: Any, features: LocalFeatureStore, graph: LocalGraphStore) -> None:
    """After the join: maps the partitions to read directly and seals this rank's
    stores if same-machine peers may read its files."""
    ctx = group.ctx
    if not ctx.is_distributed or len(group.infos) != ctx.world_size:
        return
    group.direct_infos = choose(ctx, group.num_parts, group.infos)
    group.direct = open_direct(group.direct_infos)
    if group.direct:
        log.info("pyg_dist: rank %d reads partition(s) %s directly from their files on "
                 "this machine (%s=0 turns this off)", ctx.rank, sorted(group.direct), ENV)
    peers = readers(ctx, group.num_parts, group.infos)
    if peers:
        features.seal(f"ranks {peers} on this machine read partition {graph.part}'s files "
                      f"directly and would not see it; put before the first loader, or set "
                      f"{ENV}=0")
