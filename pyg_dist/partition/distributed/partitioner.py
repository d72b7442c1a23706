"""Partitioning a chunked graph on several machines: one rank per machine (or more),
started by ``torchrun``; the output is the same format as every other partitioner's.

Each rank reads a contiguous run of every edge type's chunk files and is the *home*
of a contiguous range of node ids (all node types in one id space): it holds arrays
for those nodes only. The steps, each a series of bounded all-to-all rounds over the
gloo group:

1. assign (:mod:`.assign`): local neighbour lists, label propagation with ghost labels
   exchanged, the cluster graph gathered on rank 0 for METIS (in a child process), the
   result handed back, refinement and balancing (``method="random"``: balanced dealing);
2. relabel: new ids contiguous per partition, in original id order within it (as
   :class:`~pyg_dist.partition.partitioner.NodeOrder` numbers them);
3. edges go to the rank writing their destination's partition, which puts them in
   CSC order (ties in original edge order, as the other partitioners do);
4. node and edge data rows go from the rank reading them to the writer of their
   partition, block by block; halo rows are asked from their owners' writers;
5. uid over every partition's digest; each rank writes the partitions it serves
   (partition ``p`` by rank ``p * world // num_parts``), and ``META.json`` is written
   next to them.

Output folders: every rank writes into a hidden temporary folder beside ``--out``.
When the ranks are done, the lowest rank that can see another rank's folder (the same
file system: one machine, or a shared one) moves that rank's partitions into its own
folder, writes ``META.json`` and renames the folder to ``--out``. On machines that
share no file system, each machine's ``--out`` holds ``META.json`` and the partitions
its ranks wrote: what its trainers load. A failure on any rank, or a rank that dies,
stops every rank before anything is renamed, so ``--out`` is absent (or as it was)
or complete, never half written.
"""
from __future__ import annotations

import shutil
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from pyg_dist.chunked import ChunkedGraph
from pyg_dist.format import files, leftovers
from pyg_dist.format.identity import part_digest, partition_uid
from pyg_dist.format.meta import PartitionMeta
from pyg_dist.partition.common import Laps, PartitionTimings, type_offsets
from pyg_dist.partition.distributed.assign import DistAssigner, random_local_parts
from pyg_dist.partition.distributed.comm import ArrayComm, home_of, lookup, route
from pyg_dist.partition.distributed.graph import EdgeFiles, build_local_graph
from pyg_dist.partition.distributed.output import finish_output
from pyg_dist.partition.distributed.rows import RowExchange, writer_of
from pyg_dist.partition.options import PartitionOptions, check_options
from pyg_dist.partition.outofcore.budget import DIST_BYTES_PER_NODE
from pyg_dist.partition.outofcore.edges import EdgeBuckets, bucket_starts, part_csc
from pyg_dist.partition.outofcore.scratch import Scratch
from pyg_dist.partition.outofcore.source import open_source
from pyg_dist.progress import step
from pyg_dist.partition.writer import PartPieces, graph_meta, part_halo, write_part
from pyg_dist.hooks import kill_if_requested
from pyg_dist.typing import EdgeType, NodeType

#: bytes held per edge while a destination range is put in CSC order: its records, the
#: sort by edge id (permutation and sorted copy) and the CSC arrays
BYTES_PER_SORTED_EDGE = 96
#: bytes held per edge in one exchange round (the block read, its lookups, the
#: records sent and received, and their sorting)
BYTES_PER_ROUND_EDGE = 256


class DistPartitioner(RowExchange):
    """Partitions a chunked graph folder with every rank of the job taking a share.

    Collective: every rank constructs it with the same options (they are checked)
    and calls :meth:`generate`. With one rank it runs the same steps in one process.

    Args:
        input (str, Path or ChunkedGraph): the chunked graph; every rank reads the
            same folder (a shared file system, or the same copy on every machine).
        num_parts (int): number of partitions.
        root (str or Path): output folder (see the module docstring).
        memory_budget (int or str): bytes each rank may hold beyond its node arrays.
        comm (ArrayComm): the ranks (default: one rank).
        method (str): ``"metis"`` (label propagation + METIS on the cluster graph) or
            ``"random"``.
        seed (int): seed of every random choice.
        overwrite (bool): replace an existing non-empty ``root``.
        halo_attrs (Iterable[str]): node attributes also stored for halo nodes.
        progress (bool): report the steps on ``stderr`` (rank 0).
        allow_external_paths (bool): read chunk files outside the input folder too (see
            :meth:`~pyg_dist.chunked.ChunkedGraph.open`).
    """

    def __init__(self, input: Union[str, Path, ChunkedGraph], num_parts: int,
                 root: Union[str, Path], memory_budget: Union[int, str],
                 comm: Optional[ArrayComm] = None, method: str = "metis", seed: int = 0,
                 overwrite: bool = False, halo_attrs: Iterable[str] = ("time",),
                 progress: bool = True, allow_external_paths: bool = False) -> None:
        self.comm = comm or ArrayComm()
        check_options(PartitionOptions(method, seed, memory_budget=memory_budget,
                                       allow_external_paths=allow_external_paths),
                      "multi_machine")
        self.source, self.budget = open_source(input, num_parts, memory_budget,
                                               allow_external_paths, DIST_BYTES_PER_NODE,
                                               self.comm.world)
        self.num_parts, self.root, self.method, self.seed = num_parts, Path(root), method, seed
        self.overwrite, self.halo_attrs = overwrite, tuple(halo_attrs)
        self.progress = progress and self.comm.rank == 0
        self.block = max(self.budget.total // (4 * BYTES_PER_ROUND_EDGE), 64)
        self.timings: Optional[PartitionTimings] = None
        c = self.comm
        self.mine = [p for p in range(num_parts) if writer_of(p, num_parts, c.world) == c.rank]

    # ---- agreement -------------------------------------------------------------------------
    def _identity(self) -> Dict[str, object]:
        """What every rank must agree on: options and the input as each rank sees it."""
        src = self.source
        return {"num_parts": self.num_parts, "method": self.method, "seed": self.seed,
                "overwrite": self.overwrite, "halo_attrs": list(self.halo_attrs),
                "output folder name": self.root.name, "num_nodes": dict(src.num_nodes),
                "num_edges": {src.edge_names[et]: src.num_edges(et) for et in src.edge_names},
                "node data": {t: {k: str(v) for k, v in s.items()}
                              for t, s in src.node_specs.items()},
                "edge data": {src.edge_names[et]: {k: str(v) for k, v in s.items()}
                              for et, s in src.edge_specs.items()}}

    def _step(self, text: str):
        return step(text, enabled=self.progress)

    # ---- the whole run -------------------------------------------------------------------
    def generate(self) -> PartitionMeta:
        """Writes the partitions (collectively) and returns their :class:`PartitionMeta`."""
        comm, out = self.comm, self.root
        start, laps = time.perf_counter(), Laps()
        error: Optional[BaseException] = None
        try:
            files.prepare_folder(out, self.overwrite, "--overwrite")
        except (OSError, ValueError) as exc:
            error = exc
        infos = comm.allgather({"fields": self._identity(), "error": None if error is None
                                else f"{type(error).__name__}: {error}",
                                "host": socket.gethostname()}, "starting to partition")
        self._check_start(infos, error)
        tmp = leftovers.claim(out)
        try:
            meta = self._run(tmp, laps)
            finish_output(comm, tmp, meta, self.root)
        finally:
            leftovers.release(tmp, out)
        laps.lap("write")
        phases = {**self.assign_phases, **laps.phases_s}
        self.timings = PartitionTimings(time.perf_counter() - start,
                                        phases.get("metis", 0.0), phases)
        return meta

    def _check_start(self, infos: List[dict], error: Optional[BaseException]) -> None:
        if error is not None:
            raise error
        failed = [f"rank {r} ({i['host']}): {i['error']}" for r, i in enumerate(infos)
                  if i["error"]]
        if failed:
            from pyg_dist.rpc.agreement import PeerFailedError

            raise PeerFailedError("partitioning cannot start on other rank(s): "
                                  + "; ".join(failed))
        mine = infos[self.comm.rank]["fields"]
        for r, info in enumerate(infos):
            for key, value in info["fields"].items():
                if value != mine[key]:
                    from pyg_dist.rpc.agreement import DisagreementError

                    raise DisagreementError(
                        f"ranks disagree on {key}: rank {self.comm.rank} has {mine[key]!r}, "
                        f"rank {r} ({info['host']}) has {value!r} (every rank must run the "
                        f"same command on the same input)")

    def _run(self, tmp: Path, laps: Laps) -> PartitionMeta:
        """Every step but the output folders. An error raised here on one rank ends that
        rank; the others' next exchange fails, naming it (its error, through the health
        watchdog's store), so no rank waits forever."""
        comm = self.comm
        scratch = Scratch(tmp / f".scratch-{comm.rank}")
        with self._step("assigning nodes to partitions"):
            parts = self._assign(scratch)
        laps.lap("assign")
        kill_if_requested("assign", comm.rank)
        numbers, node_offsets = self._relabel(parts)
        del parts
        laps.lap("relabel")
        with self._step("ordering edges"):
            csc, edge_ids, edge_offsets = self._order_edges(numbers, node_offsets, scratch)
        laps.lap("order_edges")
        kill_if_requested("order_edges", comm.rank)
        with self._step("copying node and edge data"):
            node_rows, node_ids = self._node_rows(numbers, node_offsets, scratch)
            del numbers
            edge_rows = self._edge_rows(edge_ids, edge_offsets, scratch)
        laps.lap("copy_rows")
        kill_if_requested("copy_rows", comm.rank)
        pieces = {p: PartPieces(
            csc={et: v[p] for et, v in csc.items()},
            node_rows={t: {k: a[p] for k, a in v.items()} for t, v in node_rows.items()},
            edge_rows={et: {k: a[p] for k, a in v.items()} for et, v in edge_rows.items()},
            node_ids={t: v[p] for t, v in node_ids.items()},
            edge_ids={et: v[p] for et, v in edge_ids.items()}) for p in self.mine}
        halos = {p: part_halo(self.source, p, pieces[p], node_offsets, self.block)
                 for p in self.mine}
        halo_rows = self._halo_rows(halos, node_rows, node_offsets)
        digests = self._merge(comm.allgather(
            {p: part_digest(pieces[p].node_ids, pieces[p].edge_ids) for p in self.mine},
            "hashing the partitions"))
        meta = graph_meta(self.source, self.num_parts, node_offsets, edge_offsets,
                           self.method, self.seed)
        uid = partition_uid(meta.to_json(), digests)
        laps.lap("uid")
        with self._step("writing partitions"):
            stats = {p: write_part(tmp, p, self.source, pieces[p], node_offsets,
                                          halos[p], halo_rows[p], uid) for p in self.mine}
        del pieces, node_rows, edge_rows, csc, halo_rows
        shutil.rmtree(scratch.folder, ignore_errors=True)
        merged = self._merge(comm.allgather(stats, "collecting partition statistics"))
        return replace(meta, parts=tuple(merged), uid=uid)

    def _merge(self, everyone: List[Dict[int, object]]) -> list:
        """Per-partition values gathered from their writers, in partition order."""
        merged = {p: v for e in everyone for p, v in e.items()}
        return [merged[p] for p in range(self.num_parts)]

    # ---- 1. assign -------------------------------------------------------------------------
    def _local_nodes(self) -> Tuple[np.ndarray, np.ndarray, Dict[NodeType, Tuple[int, int]]]:
        """Node type index and train flag of this rank's nodes, and per type the
        (type-relative) range of its nodes."""
        src, comm = self.source, self.comm
        total = src.total_nodes
        lo, hi = total * comm.rank // comm.world, total * (comm.rank + 1) // comm.world
        group = np.empty(hi - lo, dtype=np.int64)
        train = np.zeros(hi - lo, dtype=bool)
        ranges = {}
        block = self.budget.block_rows(1)
        for i, (t, off) in enumerate(type_offsets(src.num_nodes).items()):
            a, b = max(lo, off), min(hi, off + src.num_nodes[t])
            a, b = (a, b) if a < b else (a, a)
            ranges[t] = (a - off, b - off)
            group[a - lo:b - lo] = i
            if "train" + "_mask" in src.mask_names(t):
                for s in range(a, b, block):
                    e = min(s + block, b)
                    train[s - lo:e - lo] = src.node_rows(t, "train_mask", s - off, e - off)
        return group, train, ranges

    def _assign(self, scratch: Scratch) -> np.ndarray:
        """The partition of this rank's nodes."""
        comm = self.comm
        start = time.perf_counter()
        self.files = EdgeFiles.share(comm, self.source)
        group, train, self.node_ranges = self._local_nodes()
        self.group = group
        self.assign_phases: Dict[str, float] = {}
        types = len(self.source.num_nodes)
        if self.num_parts == 1:
            return np.zeros(group.shape[0], dtype=np.int64)
        if self.method == "random":
            return random_local_parts(comm, group, train, types, self.num_parts, self.seed)
        graph = build_local_graph(comm, self.source, self.files, scratch, self.block,
                                  self.budget.total // 4)
        self.assign_phases["adjacency"] = time.perf_counter() - start
        assigner = DistAssigner(comm, graph, group, train, types, self.num_parts, self.seed,
                                self.budget.total, scratch)
        parts = assigner.metis(self.block)
        self.assign_phases.update(assigner.phases)
        Scratch.drop(graph.adj)
        return parts

    # ---- 2. relabel ------------------------------------------------------------------------
    def _relabel(self, parts: np.ndarray
                 ) -> Tuple[np.ndarray, Dict[NodeType, Tuple[int, ...]]]:
        """``[n, 2]`` (new type-relative id, partition) of this rank's nodes, and the
        partition offsets of every node type."""
        comm, P = self.comm, self.num_parts
        types = list(self.source.num_nodes)
        counts = np.zeros((len(types), P), dtype=np.int64)
        for i in range(len(types)):
            counts[i] = np.bincount(parts[self.group == i], minlength=P)
        everyone = np.array(comm.allgather(counts.tolist(), "numbering nodes"),
                            dtype=np.int64).reshape(comm.world, len(types), P)
        totals = everyone.sum(0)
        offsets = {t: tuple(int(x) for x in np.concatenate([[0], np.cumsum(totals[i])]))
                   for i, t in enumerate(types)}
        numbers = np.empty((parts.shape[0], 2), dtype=np.int64)
        numbers[:, 1] = parts
        for i, t in enumerate(types):
            idx = np.flatnonzero(self.group == i)
            tp = parts[idx]
            base = np.array(offsets[t][:-1], dtype=np.int64) + everyone[:comm.rank, i].sum(0)
            order = np.argsort(tp, kind="stable")
            starts = np.concatenate([[0], np.cumsum(np.bincount(tp, minlength=P))[:-1]])
            ranked = np.arange(idx.shape[0], dtype=np.int64) - starts[tp[order]]
            numbers[idx[order], 0] = base[tp[order]] + ranked
        return numbers, offsets

    def _numbers_of(self, numbers: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
        """``[k, 2]`` (new id, partition) of combined node ids, from their homes."""
        total = self.source.total_nodes
        bounds = np.array([total * r // self.comm.world for r in range(self.comm.world + 1)],
                          dtype=np.int64)
        lo = int(bounds[self.comm.rank])
        return lookup(self.comm, ids, bounds, lambda k: numbers[k - lo], what)

    # ---- 3. edges --------------------------------------------------------------------------
    def _order_edges(self, numbers: np.ndarray, node_offsets: Dict[NodeType, Tuple[int, ...]],
                     scratch: Scratch):
        """Per edge type: destination ranges that fit the budget (from in-degrees counted
        at the nodes' homes), records sent to the writer of their destination's partition
        and bucketed by range, then each partition's CSC built range by range."""
        comm, P = self.comm, self.num_parts
        offsets = type_offsets(self.source.num_nodes)
        csc: Dict[EdgeType, Dict[int, Tuple[np.ndarray, np.ndarray]]] = {}
        edge_ids: Dict[EdgeType, Dict[int, np.ndarray]] = {}
        edge_offsets: Dict[EdgeType, Tuple[int, ...]] = {}
        writers = np.array([writer_of(p, P, comm.world) for p in range(P)], dtype=np.int64)
        for et, name in self.source.edge_names.items():
            what = f"sending edges of {name} to their partitions"
            starts, members = self._ranges(et, numbers, node_offsets)
            buckets = EdgeBuckets(scratch, max(len(starts) - 1, 1), self.budget.buffer_bytes)
            for block in comm.rounds(self.files.blocks(self.source, et, self.block), what):
                src, dst, eid0 = block if block is not None else (
                    np.empty(0, np.int64), np.empty(0, np.int64), 0)
                found = self._numbers_of(numbers, np.concatenate(
                    [src + offsets[et[0]], dst + offsets[et[2]]]), what)
                k = src.shape[0]
                records = np.empty((k, 3), dtype=np.int64)
                records[:, 0] = found[:k, 0]
                records[:, 1] = found[k:, 0]
                records[:, 2] = eid0 + np.arange(k, dtype=np.int64)
                got, = route(comm, writers[found[k:, 1]], [records], what)
                if got.shape[0]:
                    buckets.add(np.searchsorted(starts, got[:, 1], side="right") - 1, got)
            buckets.flush()
            counts = {p: int(sum(int(buckets.counts[b]) for b in m))
                      for p, m in zip(self.mine, members)}
            per_part = self._merge(comm.allgather(counts, f"counting the edges of {name}"))
            edge_offsets[et] = tuple(int(x) for x in np.concatenate([[0], np.cumsum(per_part)]))
            csc[et], edge_ids[et] = {}, {}
            for p, m in zip(self.mine, members):
                part = part_csc(buckets, m, starts, node_offsets[et[2]][p],
                                node_offsets[et[2]][p + 1], scratch, f"{name}-{p}",
                                sort_by_id=True)
                csc[et][p], edge_ids[et][p] = (part.indptr, part.indices), part.order
        return csc, edge_ids, edge_offsets

    def _ranges(self, edge_type: EdgeType, numbers: np.ndarray,
                node_offsets: Dict[NodeType, Tuple[int, ...]]) -> Tuple[np.ndarray, List[range]]:
        """:func:`~pyg_dist.partition.outofcore.edges.bucket_starts` of this rank's
        partitions: in-degrees are counted at the destinations' homes (one pass over the
        edges), then sent to the writers."""
        comm, src = self.comm, self.source
        name, dst_type = src.edge_names[edge_type], edge_type[2]
        total = src.total_nodes
        bounds = np.array([total * r // comm.world for r in range(comm.world + 1)],
                          dtype=np.int64)
        lo = int(bounds[comm.rank])
        first = type_offsets(src.num_nodes)[dst_type]
        degree = np.zeros(int(bounds[comm.rank + 1]) - lo, dtype=np.int64)
        what = f"counting the in-edges of {name}"
        for block in comm.rounds(self.files.blocks(src, edge_type, self.block), what):
            dst = (block[1] if block is not None else np.empty(0, np.int64)) + first
            got, = route(comm, home_of(dst, bounds), [dst], what)
            degree += np.bincount(got - lo, minlength=degree.shape[0])
        offsets = node_offsets[dst_type]
        mine = {p: np.zeros(offsets[p + 1] - offsets[p], dtype=np.int64) for p in self.mine}
        what = f"sending in-degrees of {name}"
        for piece in comm.rounds(self._node_blocks(dst_type, self.block), what):
            a, b = piece if piece is not None else (0, 0)
            local = np.arange(a, b, dtype=np.int64) + first - lo
            self._send_rows(numbers[local, 0], degree[local], offsets, mine, what)
        ordered = np.concatenate([mine[p] for p in self.mine]) if self.mine else \
            np.empty(0, np.int64)
        return bucket_starts(ordered, offsets, self.mine, self.budget, BYTES_PER_SORTED_EDGE,
                             f"edge type {name}")
