"""A training script written for ``torch_geometric.distributed`` (PyG 2.5-2.7), modelled on
PyG's ``examples/distributed/pyg/node_ogb_cpu.py``, with ONLY its import lines changed to
pyg_dist. Run once per "node" (``--node_rank``); it starts its trainer with
``torch.multiprocessing.spawn`` and a ``tcp://`` process group, without torchrun.

It records, per batch, what the trainer received (JSON in ``--record``), so the test can
compare it with the same job written in pyg_dist's own style.
"""
import argparse
import json
import os.path as osp
from contextlib import nullcontext

import torch
import torch.distributed
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import pyg_dist  # was: import torch_geometric.distributed as pyg_dist
from pyg_dist import LocalFeatureStore, LocalGraphStore  # was: torch_geometric.distributed
from pyg_dist import DistContext  # was: torch_geometric.distributed.dist_context
from torch_geometric.nn import GraphSAGE


def train(model, loader, optimizer, dist_context, device, epoch, records):
    model.train()
    context = loader.enable_multithreading(1) if loader.num_workers > 0 else nullcontext()
    with context:
        for i, batch in enumerate(loader):
            batch = batch.to(device)
            records.append({"n_id": batch.n_id.tolist(), "batch_size": batch.batch_size,
                            "y": batch.y[:batch.batch_size].tolist(),
                            "x": float(batch.x.sum()), "e_id": batch.e_id.tolist()})
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
    print(f'[Node {dist_context.rank}] Train epoch {epoch} END', flush=True)
    torch.distributed.barrier()


def run_proc(local_proc_rank, num_nodes, node_rank, dataset, root_dir, master_addr,
             ddp_port, train_loader_port, num_epochs, batch_size, num_neighbors,
             num_workers, record):
    node_label_file = osp.join(root_dir, f'{dataset}-label', 'label.pt')
    train_idx = torch.load(osp.join(root_dir, f'{dataset}-train-partitions',
                                    f'partition{node_rank}.pt'))
    graph = LocalGraphStore.from_partition(
        osp.join(root_dir, f'{dataset}-partitions'), node_rank)
    feature = LocalFeatureStore.from_partition(
        osp.join(root_dir, f'{dataset}-partitions'), node_rank)
    feature.labels = torch.load(node_label_file)
    partition_data = (feature, graph)
    print(f'Partition metadata: {graph.meta}', flush=True)
    assert graph.meta['num_parts'] == num_nodes and graph.meta['node_types'] is None

    current_ctx = DistContext(world_size=num_nodes, rank=node_rank,
                              global_world_size=num_nodes, global_rank=node_rank,
                              group_name='distributed-sage')
    current_device = torch.device('cpu')
    torch.distributed.init_process_group(
        backend='gloo', rank=current_ctx.rank, world_size=current_ctx.world_size,
        init_method='tcp://{}:{}'.format(master_addr, ddp_port))

    num_neighbors = [int(i) for i in num_neighbors.split(',')]
    train_loader = pyg_dist.DistNeighborLoader(
        data=partition_data, input_nodes=train_idx, current_ctx=current_ctx,
        device=current_device, num_neighbors=num_neighbors, shuffle=True, drop_last=True,
        persistent_workers=num_workers > 0, batch_size=batch_size, num_workers=num_workers,
        master_addr=master_addr, master_port=train_loader_port, concurrency=2,
        async_sampling=True)

    torch.manual_seed(0)
    model = GraphSAGE(in_channels=1433, hidden_channels=16, num_layers=len(num_neighbors),
                      out_channels=7).to(current_device)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    records = []
    for epoch in range(1, num_epochs + 1):
        train(model, train_loader, optimizer, current_ctx, current_device, epoch, records)
    with open(record, 'w') as f:
        json.dump(records, f)
    print(f'--- [Node {current_ctx.rank}] Closing ---', flush=True)
    del model, optimizer  # DDP before the process group (see tests/inference/test_cli_export.py)
    torch.distributed.destroy_process_group()


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--dataset', type=str, default='Cora')
    parser.add_argument('--dataset_root_dir', type=str, required=True)
    parser.add_argument('--num_nodes', type=int, default=2)
    parser.add_argument('--node_rank', type=int, default=0)
    parser.add_argument('--num_epochs', type=int, default=2)
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--num_neighbors', type=str, default='5,3')
    parser.add_argument('--num_workers', type=int, default=0)
    parser.add_argument('--master_addr', type=str, default='localhost')
    parser.add_argument('--ddp_port', type=int, default=11111)
    parser.add_argument('--train_loader_port', type=int, default=11112)
    parser.add_argument('--record', type=str, required=True)
    args = parser.parse_args()
    torch.multiprocessing.spawn(
        run_proc,
        args=(args.num_nodes, args.node_rank, args.dataset, args.dataset_root_dir,
              args.master_addr, args.ddp_port, args.train_loader_port, args.num_epochs,
              args.batch_size, args.num_neighbors, args.num_workers, args.record),
        join=True)
