"""Inference benchmark: layer-wise exact vs sampled inference on 2 partitions,
against single-machine inference of the same model on the same graph, in one run.

Graph: a community graph shaped like ogbn-products (``--num-nodes`` 2,449,029 at full
scale, ``--avg-degree``, 100 features); model: GraphSAGE, 3 layers, hidden 256. Runs,
each in fresh processes (one thread each) so peak memory is per process:

- ``single_full_batch``: ``model(x, edge_index)`` on the whole graph, one process.
- ``single_pyg_inference``: PyG's ``GraphSAGE.inference()`` over a ``NeighborLoader``
  (full 1-hop neighbourhoods), one process: the issue's reference for memory. Its
  sampler runs on the test-only plain-Python stand-in for pyg-lib (not installable
  here), so its time is not pyg-lib's; the memory figures compare against it.
- ``single_layerwise``: :func:`pyg_dist.inference._layerwise` on a 1-partition copy, one
  process: the same layer-by-layer algorithm, with pyg_dist's memory bounds (feature and
  hidden pages dropped per batch): the reference for time.
- ``dist_layerwise``: :func:`pyg_dist.inference._layerwise` on 2 partitions, 2 processes.
- ``dist_layerwise_mapped``: the same with ``scratch_dir`` (hidden states in mapped
  files, at most about one batch of them resident per process).
- ``dist_sampled``: :func:`pyg_dist.inference._sampled` with ``--fanout`` (15, 10, 5).

Reported: wall seconds of the inference call (slowest rank), bytes of rows fetched from
other ranks, peak resident memory per process (``ru_maxrss``; it includes the ~0.3 GB
of a process that imported torch). The first distributed result is checked against
full batch. Graphs and partitions are cached under ``--cache-dir``. Prints lines, then
ONE JSON line.

Example:
    python benchmarks/inference.py --num-nodes 200000
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support

ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TARGET_TIME_RATIO = 1.5
TARGET_MEMORY_RATIO = 0.5
CHECK_ROWS = 500_000


def _graph(args: argparse.Namespace):
    from pyg_dist.datasets import community_graph

    return community_graph(args.num_nodes, avg_degree=args.avg_degree, feat_dim=100,
                           num_classes=47, seed=0)


def _partitioned(args: argparse.Namespace, parts: int) -> Path:
    from pyg_dist import Partitioner

    root = Path(args.cache_dir) / f"infer_{args.num_nodes}_{args.avg_degree}_{parts}"
    if not (root / "META.json").is_file():
        Partitioner(_graph(args), parts, root, seed=0, progress=False, overwrite=True).generate()
    return root


def _model(hidden: int):
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(0)
    return GraphSAGE(100, hidden, 3, out_channels=47).eval()


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def full_batch_job(args: argparse.Namespace) -> Dict:
    data = _graph(args)
    model = _model(args.hidden)
    start = time.perf_counter()
    with torch.no_grad():
        out = model(data.x, data.edge_index)
    seconds = time.perf_counter() - start
    # the reference rows travel back for the exactness check (at most 500k of them)
    return {"seconds": seconds, "peak_gb": _peak_gb(), "out": out[:CHECK_ROWS].clone()}


def pyg_inference_job(args: argparse.Namespace) -> Dict:
    """PyG's own ``GraphSAGE.inference()`` over a ``NeighborLoader`` (full 1-hop
    neighbourhoods) on the in-memory graph: the issue's single-machine reference. PyG's
    sampler needs pyg-lib, not installable here, so its ops come from the test-only
    reference in plain Python (:mod:`tests.support.pyg_lib_reference`): the memory
    is PyG's (``x`` and every layer's hidden states in memory), the time is not pyg-lib's."""
    import torch_geometric.sampler.utils
    import torch_geometric.typing
    from torch_geometric.loader import NeighborLoader

    from tests.support.pyg_lib_reference import index_sort, register_ops

    lib = register_ops()  # the ops live as long as this object
    for flag in ("WITH_PYG_LIB", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE",
                 "WITH_WEIGHTED_NEIGHBOR_SAMPLE"):
        setattr(torch_geometric.typing, flag, True)
    torch_geometric.sampler.utils.index_sort = index_sort
    data = _graph(args)
    model = _model(args.hidden)
    loader = NeighborLoader(data, num_neighbors=[-1], batch_size=args.batch_size,
                            shuffle=False)
    start = time.perf_counter()
    out = model.inference(loader)
    seconds = time.perf_counter() - start
    del lib
    return {"seconds": seconds, "peak_gb": _peak_gb(), "out": out[:CHECK_ROWS].clone()}


def dist_job(root: str, args: argparse.Namespace, mode: str, scratch: Optional[str] = None
             ) -> Dict:
    import torch.distributed as dist

    from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, shutdown_rpc
    from pyg_dist.inference import infer, _tensor_rows as rows
    from pyg_dist.format import _partition_io as io

    ctx = DistContext.from_env(rpc_timeout=600)
    if ctx.world_size > 1:
        dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    pid = ctx.partition_id(io.read_meta(Path(root)).num_parts)
    data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
    neighbors = None if mode == "layerwise" else args.fanout
    options = {"scratch_dir": scratch} if scratch else {}
    rows.reset_fetch_stats()
    start = time.perf_counter()
    result = infer(_model(args.hidden), data, num_neighbors=neighbors,
                   batch_size=args.batch_size, progress=False, ctx=ctx, **options)
    seconds = time.perf_counter() - start
    lo, hi = rows.own_range(result)
    fetched = rows.reset_fetch_stats()
    sample = (lo, rows.own_rows(result, lo, min(hi, lo + 1000)))
    del result  # a result still held at exit after shutdown_rpc can hang the exit
    if ctx.world_size > 1:
        shutdown_rpc()
    return {"seconds": seconds, "peak_gb": _peak_gb(), "bytes": fetched.bytes,
            "sample": sample}


def _run(fn, world: int, *args, timeout: float) -> List[Dict]:
    from pyg_dist.testing import run_ranks

    return run_ranks(fn, world, *args, timeout=timeout, extra_env=ONE_THREAD, start_method="spawn")


def _summary(name: str, outs: List[Dict]) -> Dict:
    res = {f"{name}_s": round(max(o["seconds"] for o in outs), 2),
           f"{name}_peak_gb": round(max(o["peak_gb"] for o in outs), 3)}
    if "bytes" in outs[0]:
        res[f"{name}_bytes_fetched"] = int(sum(o["bytes"] for o in outs))
    print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in res.items()), flush=True)
    return res


def _check(root: Path, outs: List[Dict], full: torch.Tensor) -> Tuple[float, int]:
    """Largest difference from full batch over the first rows of every rank's shard
    (those among the reference's original ids)."""
    from pyg_dist.format import read_id_map

    node_map = read_id_map(root)
    worst, checked = 0.0, 0
    for out in outs:
        lo, got = out["sample"]
        ref_ids = node_map[lo:lo + got.size(0)]
        keep = ref_ids < full.size(0)
        checked += int(keep.sum())
        if keep.any():
            worst = max(worst, float((got[keep] - full[ref_ids[keep]]).abs().max()))
    return worst, checked


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-nodes", type=int, default=2_449_029)
    parser.add_argument("--avg-degree", type=float, default=25.0)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "pyg_dist_bench"))
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--skip-sampled", action="store_true", help="leave out sampled "
                        "inference (for memory runs)")
    parser.add_argument("--skip-mapped", action="store_true", help="leave out the run with "
                        "hidden states in mapped files")
    parser.add_argument("--skip-full-batch", action="store_true", help="leave out full-batch "
                        "inference (it needs the whole graph's activations in memory); the "
                        "results are then checked against PyG's inference()")
    parser.add_argument("--skip-pyg", action="store_true", help="leave out PyG's own "
                        "GraphSAGE.inference() (its sampler runs in plain Python here)")
    args = parser.parse_args(argv)
    one, two = _partitioned(args, 1), _partitioned(args, 2)
    results: Dict = {"num_nodes": args.num_nodes, "avg_degree": args.avg_degree,
                     "hidden": args.hidden, "fanout": args.fanout, "batch_size": args.batch_size}
    full = None
    if not args.skip_full_batch:
        full = _run(full_batch_job, 1, args, timeout=args.timeout)[0]
        results.update(_summary("single_full_batch", [full]))
    if not args.skip_pyg:
        pyg = _run(pyg_inference_job, 1, args, timeout=args.timeout)[0]
        results.update(_summary("single_pyg_inference", [pyg]))
        if full is not None:
            results["single_pyg_inference_max_abs_diff"] = round(
                float((pyg["out"] - full["out"]).abs().max()), 6)
        full = full or pyg  # PyG's exact inference is the reference then
    if full is None:
        raise SystemExit("nothing to check against: drop --skip-full-batch or --skip-pyg")
    results.update(_summary("single_layerwise",
                            _run(dist_job, 1, str(one), args, "layerwise", timeout=args.timeout)))
    dist_outs = _run(dist_job, 2, str(two), args, "layerwise", timeout=args.timeout)
    results.update(_summary("dist_layerwise", dist_outs))
    results["dist_layerwise_max_abs_diff"], results["dist_layerwise_rows_checked"] = \
        _check(two, dist_outs, full["out"])
    single = results["single_layerwise_s"], results["single_layerwise_peak_gb"]
    results["time_ratio_vs_single_layerwise"] = round(results["dist_layerwise_s"] / single[0], 3)
    results["memory_ratio_vs_single_layerwise"] = round(
        results["dist_layerwise_peak_gb"] / single[1], 3)
    memory_ratios = [results["memory_ratio_vs_single_layerwise"]]
    if not args.skip_mapped:
        scratch = Path(args.cache_dir) / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        mapped = _run(dist_job, 2, str(two), args, "layerwise", str(scratch),
                      timeout=args.timeout)
        results.update(_summary("dist_layerwise_mapped", mapped))
        results["dist_layerwise_mapped_max_abs_diff"] = _check(two, mapped, full["out"])[0]
        results["mapped_time_ratio_vs_single_layerwise"] = round(
            results["dist_layerwise_mapped_s"] / single[0], 3)
        results["mapped_memory_ratio_vs_single_layerwise"] = round(
            results["dist_layerwise_mapped_peak_gb"] / single[1], 3)
        memory_ratios.append(results["mapped_memory_ratio_vs_single_layerwise"])
    if not args.skip_sampled:
        results.update(_summary("dist_sampled", _run(dist_job, 2, str(two), args, "sampled",
                                                     timeout=args.timeout)))
    if not args.skip_pyg:  # the reference: PyG's inference() on one machine
        for name in ("dist_layerwise", "dist_layerwise_mapped"):
            if f"{name}_peak_gb" in results:
                results[f"{name}_memory_ratio_vs_pyg_inference"] = round(
                    results[f"{name}_peak_gb"] / results["single_pyg_inference_peak_gb"], 3)
        memory_ratios = [v for k, v in results.items() if k.endswith("_vs_pyg_inference")]
    results["meets_time_target"] = results["time_ratio_vs_single_layerwise"] <= TARGET_TIME_RATIO
    results["meets_memory_target"] = min(memory_ratios) <= TARGET_MEMORY_RATIO
    print(json.dumps(results))


if __name__ == "__main__":
    main()
