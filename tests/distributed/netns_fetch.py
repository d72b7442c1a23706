"""Run by test_netns.py on each emulated machine: fetches every remote node's features
of a 2-partition folder over RPC and prints the bytes received and the seconds taken."""
import json
import sys
import time

import torch

from pyg_dist import DistContext, DistNeighborSampler, LocalFeatureStore, LocalGraphStore
from pyg_dist import shutdown_rpc
from pyg_dist.format import _partition_io as io

root = sys.argv[1]
ctx = DistContext.from_env(rpc_timeout=120)
meta = io.read_meta(root)
pid = ctx.partition_id(meta.num_parts)
data = (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))
sampler = DistNeighborSampler(data, num_neighbors=[1], current_ctx=ctx)
(node_type,) = meta.node_types
book = meta.node_book(node_type)
remote = torch.cat([torch.arange(0, book.start(pid)),
                    torch.arange(book.start(pid) + book.size(pid), meta.num_nodes[node_type])])
sampler.group.loop.run(sampler.fetcher.fetch({node_type: remote[:10]}, {}))  # connect
sampler.fetcher.stats.reset()
start = time.perf_counter()
sampler.group.loop.run(sampler.fetcher.fetch({node_type: remote}, {}))
elapsed = time.perf_counter() - start
print(json.dumps({"bytes": sampler.fetcher.stats.bytes, "seconds": elapsed}), flush=True)
shutdown_rpc()
