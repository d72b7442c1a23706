"""``pyg-dist-export``: checkpoint to inference on another number of ranks. A model
trained and checkpointed with ``pyg_dist.checkpoint`` on 2 ranks is exported by the CLI
on 1 and 3 ranks (exact layer-wise), and every exported row equals full-batch
single-machine inference of the checkpointed model on the original graph."""
from __future__ import annotations

import json
import os
from typing import List

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

from pyg_dist import Partitioner, checkpoint
from pyg_dist.cli import export as cli
from pyg_dist.inference import read_export
from pyg_dist.testing import run_ranks

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(900)]

ARGS = ["--model", "sage", "--hidden", "16", "--layers", "2", "--out-channels", "7"]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return GraphSAGE(1433, 16, 2, out_channels=7)


def _train(ckpt: str) -> None:
    """A few DDP steps on random graphs (each rank its own), then a checkpoint."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ddp = DistributedDataParallel(_model())
    optimizer = torch.optim.Adam(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(50, 1433, generator=gen)
        edge_index = torch.randint(0, 50, (2, 200), generator=gen)
        optimizer.zero_grad()
        ddp(x, edge_index).pow(2).mean().backward()
        optimizer.step()
    checkpoint.save(ckpt, step=3, state={"model": ddp, "optimizer.0": optimizer})
    # DDP first: a reducer that outlives the process group destroys it holding the GIL,
    # which can deadlock with gloo's threads (the test then hangs at exit)
    del ddp, optimizer
    dist.destroy_process_group()


def _export(argv: List[str]) -> int:
    code = cli.main(argv)
    if dist.is_initialized():
        dist.destroy_process_group()
    return code


@pytest.fixture(scope="module")
def trained(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    run_ranks(_train, 2, str(root / "ckpt"), timeout=400)
    model = _model()
    assert checkpoint.load(root / "ckpt", state={"model": model}).world_size == 2
    with torch.no_grad():
        expected = model.eval()(cora.x, cora.edge_index).numpy()
    assert not np.allclose(expected, _model().eval()(cora.x, cora.edge_index).detach().numpy())
    return root / "ckpt", expected


@pytest.mark.parametrize("ranks", [1, 3])
def test_checkpoint_to_inference_on_other_rank_counts(cora, trained, tmp_path, ranks):
    ckpt, expected = trained
    parts = tmp_path / "parts"
    Partitioner(cora, ranks, parts, seed=0, progress=False).generate()
    out = tmp_path / "exp"
    argv = ["--partition-dir", str(parts), "--checkpoint-dir", str(ckpt), "--out", str(out),
            "--batch-size", "500", *ARGS]
    assert run_ranks(_export, ranks, argv, timeout=400) == [0] * ranks
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["node_types"]["_N"]) == ranks
    ids, values = read_export(out)["_N"]
    assert np.array_equal(np.sort(ids), np.arange(cora.num_nodes))
    joined = np.empty_like(values)
    joined[ids] = values
    assert np.allclose(joined, expected, atol=1e-5)


def test_bad_input_is_one_line_exit_2(cora, trained, tmp_path, capsys):
    ckpt, _ = trained
    parts = tmp_path / "parts"
    Partitioner(cora, 1, parts, seed=0, progress=False).generate()
    base = ["--partition-dir", str(parts), "--out", str(tmp_path / "exp")]
    cases = [(base + ["--checkpoint-dir", str(ckpt), "--model", "sage", "--hidden", "0",
                      "--layers", "2"], "--hidden must be a positive"),
             (base + ["--checkpoint-dir", str(tmp_path / "nope"), *ARGS], "is not a folder"),
             (["--partition-dir", str(tmp_path), "--out", "x", "--checkpoint-dir", str(ckpt),
               *ARGS], "META.json")]
    parts2, taken, a_file = tmp_path / "parts2", tmp_path / "taken", tmp_path / "a_file"
    Partitioner(cora, 2, parts2, seed=0, progress=False).generate()
    taken.mkdir()
    (taken / "x").write_text("someone's data")
    a_file.write_text("")
    good = ["--partition-dir", str(parts), "--checkpoint-dir", str(ckpt)]
    cases += [
        (base + ["--checkpoint-dir", str(ckpt), *ARGS, "--num-neighbors", "-5"],
         "--num-neighbors"),
        (good + ["--out", str(taken), *ARGS], f"{taken} exists and is not empty"),
        (base + ["--checkpoint-dir", str(ckpt), "--model", "sage", "--hidden", "32",
                 "--layers", "2", "--out-channels", "7"], "into the model the flags describe"),
        (base + ["--checkpoint-dir", str(ckpt), "--model", "gcn", "--hidden", "16",
                 "--layers", "2", "--out-channels", "7"], "into the model the flags describe"),
        (["--partition-dir", str(parts2), "--checkpoint-dir", str(ckpt), "--out",
          str(tmp_path / "exp2"), *ARGS], "2 partitions"),
        (base + ["--checkpoint-dir", str(ckpt), *ARGS, "--scratch-dir", str(a_file)],
         "--scratch-dir"),
    ]
    for argv, match in cases:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("pyg-dist-export: error:") and match in err
        assert "\n" not in err, err
    assert (taken / "x").read_text() == "someone's data"
