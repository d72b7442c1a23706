"""Sampled inference: every node's output from a sampled neighbourhood, each node once.

For models that cannot be run one layer at a time. Every rank iterates a
:class:`~pyg_dist.loader.DistNeighborLoader` over the nodes whose rows it owns in
the result (its share of its partition, in id order, no shuffling, no padding
batches) and writes each batch's seed rows of ``model(batch.x, batch.edge_index)``.
Sampling is random (seeded by ``seed``), so the result is the same as a
single-machine ``NeighborLoader`` only where the sample is the full neighbourhood.
"""
from __future__ import annotations

import sys
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_dist.embedding import DistTensor
from pyg_dist.embedding.comm import Comm
from pyg_dist.embedding.layout import rank_offsets
from pyg_dist.inference import rows
from pyg_dist.loader import DistNeighborLoader
from pyg_dist.progress import track
from pyg_dist.rpc import DistContext
from pyg_dist.sampler.neighbor_sampler import unpack_stores
from pyg_dist.sampler.serving import serving_group
from pyg_dist.store import LocalFeatureStore, LocalGraphStore

Device = Union[str, torch.device, None]


@torch.no_grad()
def sampled(model: torch.nn.Module, data: Tuple[LocalFeatureStore, LocalGraphStore],
            num_neighbors: List[int], *, batch_size: int = 1024, device: Device = None,
            num_workers: int = 0, seed: int = 0, progress: Optional[bool] = None,
            ctx: Optional[DistContext] = None) -> DistTensor:
    """Every node's output of ``model`` on sampled neighbourhoods (collective).

    Args:
        model (torch.nn.Module): called as ``model(batch.x, batch.edge_index)``; the
            first ``batch.batch_size`` rows of its output are the seeds' rows. Run in
            eval mode (restored afterwards), without autograd.
        data (tuple): ``(LocalFeatureStore, LocalGraphStore)`` of this rank's partition.
        num_neighbors (List[int]): neighbours sampled per hop, as for the loader.
        batch_size (int): seed nodes per batch.
        device (str or torch.device, optional): where batches go and the model runs.
        num_workers (int): sampler worker processes of the loader.
        seed (int): the sampling seed.
        progress (bool, optional): report batches (default: on a terminal only).
        ctx (DistContext, optional): this process's context (default: from the env).

    Returns:
        DistTensor: every node's output row, sharded like the graph, indexed by
        relabelled node id (see :mod:`pyg_dist.inference.rows`).

    Raises:
        RuntimeError: if some node was not computed exactly once.
    """
    features, graph = unpack_stores(data)
    if graph.is_hetero:
        raise NotImplementedError("sampled inference on heterogeneous graphs is not "
                                  "implemented yet")
    ctx = ctx or DistContext.from_env()
    if ctx.world_size > 1:
        serving_group(ctx, features, graph)
    book = graph.node_book()
    offsets = rank_offsets(book.total, ctx.world_size, book)
    start, stop = offsets[ctx.rank], offsets[ctx.rank + 1]
    loader = DistNeighborLoader(data, num_neighbors,
                                input_nodes=rows.seeds_of(features, start, stop),
                                batch_size=batch_size, shuffle=False, even_batches=False,
                                num_workers=num_workers, seed=seed, device=device,
                                current_ctx=ctx)
    was_training = model.training
    model.eval()
    try:
        return _run(model, loader, (start, stop), graph, progress)
    finally:
        model.train(was_training)
        loader.close()


def _run(model: torch.nn.Module, loader: DistNeighborLoader, own: Tuple[int, int],
         graph: LocalGraphStore, progress: Optional[bool]) -> DistTensor:
    (start, stop), book = own, graph.node_book()
    part = (book.start(graph.part), book.start(graph.part) + book.size(graph.part))
    show = sys.stderr.isatty() if progress is None else progress
    batches = iter(track(loader, "sampled inference", enabled=show, unit="batches",
                         count=("seeds", _num_seeds)))
    first = next(batches, None)
    y = _seed_rows(model, first) if first is not None else None
    dims = Comm.current().all_gather_object(None if y is None else int(y.shape[1]))
    known = {d for d in dims if d is not None}
    if len(known) != 1:
        raise RuntimeError(f"sampled inference: ranks disagree on the output width "
                           f"(by rank: {dims})")
    out = rows.node_rows(f"{rows.run_prefix()}.sampled", book, known.pop())
    done = torch.zeros(stop - start, dtype=torch.long)
    batch = first
    while batch is not None:
        seeds = rows.batch_seeds(batch)
        rows.count_batch_fetches(batch, *part, batch.x.element_size() * batch.x.size(1))
        rows.write_rows(out, seeds, y)
        done.index_add_(0, seeds.cpu() - start, torch.ones(seeds.numel(), dtype=torch.long))
        batch = next(batches, None)
        y = _seed_rows(model, batch) if batch is not None else None
    if not bool((done == 1).all()):
        raise RuntimeError(f"sampled inference computed {int((done == 0).sum())} node(s) "
                           f"never and {int((done > 1).sum())} more than once")
    out.comm.barrier()  # every rank's rows are written before anyone reads them
    return out


def _seed_rows(model: torch.nn.Module, batch) -> Tensor:
    y = model(batch.x, batch.edge_index)[:batch.batch_size]
    return y.to("cpu", torch.float32)


def _num_seeds(batch) -> int:
    """Seeds of a batch, for the progress line's seeds/s."""
    return int(batch.batch_size)
