"""Inference and export: every node's output of a trained GraphSAGE, computed exactly,
layer by layer, and written to disk by the dataset's own node ids.

    pyg-dist-partition --dataset Cora --root data/planetoid --num-parts 2 --out parts/cora
    torchrun --nproc-per-node=2 examples/node_classification.py --partition-dir parts/cora \\
        --checkpoint-dir ckpt
    torchrun --nproc-per-node=2 examples/inference.py --partition-dir parts/cora \\
        --checkpoint-dir ckpt --out emb

The model comes from the newest checkpoint ``node_classification.py`` saved (pass the
same ``--hidden`` and ``--num-layers``); only its ``model`` entry is read. Each rank
computes the rows of the nodes its partition owns, with every neighbour (no sampling):
the result equals full-batch ``model(x, edge_index)``. ``--out`` receives
``manifest.json`` and one ``.npy`` pair of ids and rows per partition; read it back with
``pyg_dist.inference.read_export``. Rank 0 prints one JSON line of results last.
"""
import argparse
import time

import torch
from torch_geometric.nn import GraphSAGE

import pyg_dist
from pyg_dist import checkpoint, loop
from pyg_dist.inference import export

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--partition-dir", required=True, help="output of pyg-dist-partition")
parser.add_argument("--checkpoint-dir", required=True, help="where training saved the model")
parser.add_argument("--out", required=True, help="the export folder (replaced if present)")
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--num-layers", type=int, default=2)
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])


@torch.no_grad()
def test_accuracy(out, features, device):
    """Accuracy over the ``test`` nodes this rank computed, summed over every rank."""
    lo, hi = out.local_range                 # the (internal) row ids this rank holds
    test = features.split_ids("test")        # the partition's test nodes, same ids
    test = test[(test >= lo) & (test < hi)]
    pred = out.local_data[test - lo].argmax(-1)
    y = features.gather(features.resolve(None), "y", test)
    correct, total = loop.reduce([(pred == y).sum(), test.numel()], device)
    return correct / max(total, 1)


def main():
    args = parser.parse_args()
    ctx, device = loop.setup(args.device)

    data = loop.load_partition(args.partition_dir, ctx)
    num_nodes = sum(data[1].meta.num_nodes.values())  # of the whole graph

    # The model as training left it: same shape, weights from the checkpoint.
    num_features = data[0].get_tensor_size(None, "x")[1]
    y = data[0].get_tensor(None, "y")
    num_classes = int(loop.reduce([y.max()], op="max")[0]) + 1
    model = GraphSAGE(num_features, args.hidden, num_layers=args.num_layers,
                      out_channels=num_classes).to(device)
    info = checkpoint.load(args.checkpoint_dir, state={"model": model})
    if info is None:
        parser.error(f"no checkpoint in {args.checkpoint_dir}: train with --checkpoint-dir")
    loop.log(ctx, f"model of step {info.step} from {info.path}")
    model.eval()

    start = time.perf_counter()
    out = pyg_dist.infer(model, data, device=device, ctx=ctx)  # every node, exactly
    seconds = time.perf_counter() - start
    acc = test_accuracy(out, data[0], device)
    loop.log(ctx, f"inference {seconds:.2f}s | test acc {acc:.4f}")

    export(out, args.partition_dir, args.out, overwrite=True, ctx=ctx)
    loop.log(ctx, f"exported {num_nodes} rows to {args.out}")
    loop.finish(ctx, (), {"test_acc": acc, "infer_s": seconds, "export": args.out,
                          "rows": num_nodes, "world_size": ctx.world_size})


if __name__ == "__main__":
    main()
