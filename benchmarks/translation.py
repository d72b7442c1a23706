"""What original ids cost at loader construction: time and memory of the translation.

Run by ``benchmarks/sampling.py --setting dist`` (``--ids-nodes``, 0 to skip): on a
community graph of that many nodes in 2 partitions, 2 processes each take their
``train`` seeds as original ids (:func:`pyg_dist.node_split`) and build a
:class:`~pyg_dist.DistNeighborLoader` from them (the collective translation of
:mod:`pyg_dist.loader._id_collective`). Reported per process: seconds of both steps, the PSS
and RSS of the one translation table a process maps (its partition's
``node_ids.pt``, shared by every process of the machine through the page cache) and
the private memory the construction added; then bytes per node and the table's size
per machine at ``ogbn-papers100M`` scale (111M nodes).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List

PAPERS100M_NODES = 111_059_956


def _smaps(suffix: str) -> Dict[str, int]:
    """``Rss``/``Pss`` (bytes) of this process's mappings of files ending in ``suffix``,
    and its private memory (``Private_Clean + Private_Dirty`` of every mapping)."""
    out = {"rss": 0, "pss": 0, "private": 0}
    current = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if not head:
                continue
            if not head[0].endswith(":"):  # a mapping's header line
                current = head[-1] if len(head) >= 6 else ""
                continue
            key, kib = head[0][:-1], int(head[1]) if head[1].isdigit() else 0
            if key in ("Private_Clean", "Private_Dirty"):
                out["private"] += kib * 1024
            if current.endswith(suffix) and key in ("Rss", "Pss"):
                out[key.lower()] += kib * 1024
    return out


def translation_job(root: str, fanout: List[int], batch_size: int, timeout: float) -> dict:
    """One process: original seeds, a loader built from them, memory before/after."""
    import torch
    import torch.distributed as dist

    from pyg_dist import (DistContext, DistNeighborLoader, LocalFeatureStore, LocalGraphStore,
                          node_split)
    from pyg_dist.format import _partition_io as io
    from pyg_dist.loader._id_collective import cpu_group
    from pyg_dist.rpc import shutdown_rpc

    torch.set_num_threads(1)
    ctx = DistContext.from_env(rpc_timeout=timeout)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    stores = (LocalFeatureStore.from_partition(root, pid),
              LocalGraphStore.from_partition(root, pid))
    try:
        before = _smaps("node_ids.pt")
        start = time.perf_counter()
        seeds = node_split(stores, "train", ctx)
        split_s = time.perf_counter() - start
        dist.barrier(group=cpu_group(ctx))
        start = time.perf_counter()
        loader = DistNeighborLoader(stores, fanout, input_nodes=seeds, batch_size=batch_size,
                                    current_ctx=ctx)
        loader_s = time.perf_counter() - start
        after = _smaps("node_ids.pt")
        batch = next(iter(loader))
        assert torch.isin(batch.n_id[:batch.batch_size], seeds).all()
        loader.close()
        return {"seeds": seeds.numel(), "owned": stores[1].node_book().size(pid),
                "split_s": split_s, "loader_s": loader_s, "table_rss": after["rss"],
                "table_pss": after["pss"],
                "private_added": after["private"] - before["private"]}
    finally:
        shutdown_rpc()


def report(outs: List[dict], num_nodes: int) -> Dict[str, float]:
    """The JSON fields, printed as they are computed."""
    owned = sum(o["owned"] for o in outs)
    pss = sum(o["table_pss"] for o in outs)
    per_node = pss / owned
    res = {"ids_nodes": num_nodes, "ids_seeds": sum(o["seeds"] for o in outs),
           "ids_node_split_s": round(max(o["split_s"] for o in outs), 3),
           "ids_loader_construction_s": round(max(o["loader_s"] for o in outs), 3),
           "ids_table_pss_bytes": pss, "ids_table_rss_bytes": sum(o["table_rss"] for o in outs),
           "ids_table_bytes_per_node": round(per_node, 3),
           "ids_private_added_bytes_max": max(o["private_added"] for o in outs),
           "ids_papers100m_table_bytes_whole_graph": round(per_node * PAPERS100M_NODES)}
    print(f"ids: {res['ids_seeds']} original seeds of {num_nodes} nodes: node_split "
          f"{res['ids_node_split_s']:.2f}s, loader construction (with translation) "
          f"{res['ids_loader_construction_s']:.2f}s; translation table mapped "
          f"{pss / 1e6:.1f} MB PSS = {per_node:.2f} bytes per node (shared by a machine's "
          f"processes); private memory added by construction <= "
          f"{res['ids_private_added_bytes_max'] / 1e6:.1f} MB per process; at 111M nodes "
          f"{res['ids_papers100m_table_bytes_whole_graph'] / 1e9:.2f} GB over all machines "
          f"(divided by the number of machines)", flush=True)
    return res
