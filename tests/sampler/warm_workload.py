"""A representative sampling + feature-fetch workload, and the numba signatures it
leaves behind (run by ``test_warmup.py`` in a fresh interpreter).

Usage: ``python warm_workload.py [--no-warm-up]``: prints one JSON line with the
seconds ``warm_up()`` took and the signatures that appeared after it.
"""
from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Set

import numba
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler_helpers import Parted, load_parted, small_hetero  # noqa: E402

from pyg_dist import Partitioner  # noqa: E402
from pyg_dist.sampler import FeatureFetcher  # noqa: E402
from pyg_dist.sampler._hop_state import HopState  # noqa: E402
from pyg_dist.sampler._warmup import warm_up  # noqa: E402
from pyg_dist.testing import encode_ids  # noqa: E402


def signatures() -> Dict[str, Set[str]]:
    """Compiled signatures of every numba dispatcher of the library (partitioning
    kernels excepted: they never run during training or serving)."""
    out: Dict[str, Set[str]] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("pyg_dist.") or name.startswith("pyg_dist.partition"):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, numba.core.dispatcher.Dispatcher):
                out[f"{name}.{attr}"] = {str(s) for s in value.signatures}
    return out


def _sample(parted: Parted, part: int, seeds: Dict, **opts) -> HopState:
    """Two hops as the distributed sampler runs them: owners' samplers per edge type."""
    meta = parted.meta
    disjoint = opts.get("time_attr") is not None
    seed_time = {t: torch.full((s.numel(),), 60) for t, s in seeds.items()} if disjoint else None
    state = HopState(seeds, disjoint, seed_time, original_eids=True)
    for hop, fanout in enumerate(opts.pop("fanouts", (3, 100))):
        sampled = {}
        for edge_type in meta.edge_types:
            front = state.frontier.get(edge_type[2])
            sampled[edge_type] = 0
            if front is None:
                continue
            owner = meta.node_book(edge_type[2]).owner(front.ids)
            for p in owner.unique().tolist():
                pos = (owner == p).nonzero().view(-1)
                time = front.time[pos] if front.time is not None else None
                room = torch.empty(pos.numel() * max(fanout, 0), dtype=torch.long)
                counts, nbrs, eids, original = parted.samplers[p].sample(
                    edge_type, front.ids[pos], fanout, opts.get("replace", False),
                    2**63 + 17 * hop + p, time, opts.get("time_attr"),
                    opts.get("strategy", "uniform"), opts.get("weight_attr"),
                    original_eids=True, values_out=room)  # ids drawn as loaders draw them
                col = torch.repeat_interleave(front.local[pos], counts)
                batch = (torch.repeat_interleave(front.batch[pos], counts)
                         if front.batch is not None else None)
                state.add_edges(edge_type, col, nbrs, eids, batch, original)
                sampled[edge_type] += nbrs.numel()
        state.end_hop(sampled)
    return state


def _fetch(parted: Parted, part: int, state: HopState) -> None:
    sub = state.output(list(parted.meta.edge_types))
    fetcher = FeatureFetcher(parted.group(part), parted.samplers[part], parted.meta,
                             max_rpc_bytes=256, original_ids=True)  # with the id column
    asyncio.run(fetcher.fetch(sub.node, sub.edge, unique=True))
    asyncio.run(fetcher.fetch(sub.node, {}, unique=False))


def workload(parted: Parted) -> None:
    meta = parted.meta
    for part in range(meta.num_parts):
        seeds = {t: torch.arange(meta.node_book(t).start(part),
                                 meta.node_book(t).start(part) + 6) for t in meta.node_types[:1]}
        for opts in (dict(), dict(replace=True), dict(fanouts=(-1, 2)),
                     dict(weight_attr="w"), dict(weight_attr="w", replace=True),
                     dict(time_attr="time"), dict(time_attr="time", strategy="last"),
                     dict(time_attr="time", strategy="last", replace=True)):
            _fetch(parted, part, _sample(parted, part, seeds, **opts))


def _homo(root: Path) -> Parted:
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(5)
    n, e = 200, 3000
    data = Data(x=torch.randn(n, 6, generator=g), y=torch.randint(0, 3, (n,), generator=g),
                edge_index=torch.randint(0, n, (2, e), generator=g),
                w=torch.rand(e, generator=g), time=torch.randint(0, 100, (n,), generator=g))
    Partitioner(encode_ids(data), 2, root, method="random", progress=False).generate()
    return load_parted(root, 2)


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    Partitioner(small_hetero(), 2, tmp / "hetero", method="random", progress=False).generate()
    graphs = [load_parted(tmp / "hetero", 2), _homo(tmp / "homo")]
    narrow = load_parted(tmp / "hetero", 2)  # the same graph with int32 indices
    for sampler in narrow.samplers:
        for csc in sampler.graph.csc_by_type.values():
            csc.indices = csc.indices.to(torch.int32)
    graphs.append(narrow)
    start = time.perf_counter()
    spent = warm_up() if "--no-warm-up" not in sys.argv else 0.0
    again_start = time.perf_counter()
    again = warm_up() if "--no-warm-up" not in sys.argv else 0.0
    again_s = time.perf_counter() - again_start
    before = signatures()
    for parted in graphs:
        workload(parted)
    after = signatures()
    new = {k: sorted(v - before.get(k, set())) for k, v in after.items()
           if v - before.get(k, set())}
    print(json.dumps({"warm_up_s": spent, "wall_s": again_start - start, "again_s": again_s,
                      "again_returned": again, "new": new,
                      "warmed": {k: len(v) for k, v in before.items() if v}}))


if __name__ == "__main__":
    main()
