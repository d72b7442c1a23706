"""Real torch_geometric.distributed partition folders (PyG 2.8.1's own Partitioner) with
PyG-example extras, and the round-trip check of a converted folder.

PyG's METIS step needs pyg-lib or torch-sparse (not installed): ``ClusterData._metis``
is replaced by a deterministic balanced assignment, and PyG writes everything else.
Node features carry the original node id in column 0 and edge features the original
edge id, so a converted folder can be checked against the graph it came from.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Union

import pytest
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from pyg_dist import LocalFeatureStore, LocalGraphStore
from pyg_dist.datasets import community_graph
from pyg_dist.format import _partition_io as io
from pyg_dist.format._integrity import verify_folder
from pyg_dist._typing import HOMO_EDGE, HOMO_NODE, edge_key
from pyg_dist.format import read_id_map

SPLITS = ("train", "val", "test")


def fake_metis(self, edge_index: Tensor, num_nodes: int) -> Tensor:
    """A deterministic, balanced, shuffled assignment in place of METIS."""
    gen = torch.Generator().manual_seed(num_nodes)
    cluster = torch.empty(num_nodes, dtype=torch.long)
    cluster[torch.randperm(num_nodes, generator=gen)] = torch.arange(num_nodes) % self.num_parts
    return cluster


@dataclass
class PygFolder:
    """A PyG partition folder ``save_dir/<name>-partitions`` and what it was made from.

    Args:
        data: the original graph.
        root: the partition folder.
        num_parts: number of partitions.
        assignment: PyG's partition of every original node, per node type.
        label_type: the node type of ``label.pt`` and the split files.
        masks: per split, the nodes the split files list (PyG's example drops the
            remainder of an uneven split).
    """
    data: Union[Data, HeteroData]
    root: Path
    num_parts: int
    assignment: Dict[str, Tensor]
    label_type: str
    masks: Dict[str, Tensor]

    def copy(self, dest: Path) -> "PygFolder":
        """This folder and its extras, copied under ``dest`` (for tests that damage it)."""
        for path in self.root.parent.iterdir():
            shutil.copytree(path, dest / path.name)
        return PygFolder(self.data, dest / self.root.name, self.num_parts, self.assignment,
                         self.label_type, self.masks)

    def drop_extras(self) -> "PygFolder":
        """Removes the labels and split folders beside a copy (keeps the partitions)."""
        for path in self.root.parent.iterdir():
            if path != self.root:
                shutil.rmtree(path)
        return self


def _id_features(n: int, width: int, gen: torch.Generator) -> Tensor:
    return torch.cat([torch.arange(n, dtype=torch.float32).unsqueeze(1),
                      torch.randn(n, width - 1, generator=gen)], dim=1)


def homo_graph() -> Data:
    data = community_graph(600, avg_degree=6, feat_dim=3, num_classes=4, seed=3)
    gen = torch.Generator().manual_seed(0)
    data.x = _id_features(data.num_nodes, 3, gen)
    data.edge_attr = _id_features(data.num_edges, 2, gen)
    data.time = torch.randint(2000, 2024, (data.num_nodes,), generator=gen)
    return data


def hetero_graph() -> HeteroData:
    gen = torch.Generator().manual_seed(1)
    data = HeteroData()
    sizes = {"paper": 300, "author": 200, "institution": 20}
    for t, n in sizes.items():
        data[t].x = _id_features(n, 3, gen)
        data[t].time = torch.randint(2000, 2024, (n,), generator=gen)
    data["paper"].y = torch.randint(0, 4, (300,), generator=gen)
    for split, (lo, hi) in zip(SPLITS, ((0.0, 0.5), (0.5, 0.7), (0.7, 1.0))):
        u = torch.rand(300, generator=torch.Generator().manual_seed(7))
        data["paper"][f"{split}_mask"] = (u >= lo) & (u < hi)
    for src, rel, dst, m in (("paper", "cites", "paper", 900), ("author", "writes", "paper", 600),
                             ("paper", "written_by", "author", 600),
                             ("author", "affiliated", "institution", 200)):
        store = data[src, rel, dst]
        store.edge_index = torch.stack([torch.randint(0, sizes[src], (m,), generator=gen),
                                        torch.randint(0, sizes[dst], (m,), generator=gen)])
        store.edge_attr = _id_features(m, 2, gen)
        store.edge_time = torch.randint(2000, 2024, (m,), generator=gen)
    return data


def write_extras(save_dir: Path, name: str, y: Tensor, masks: Dict[str, Tensor],
                 num_parts: int) -> Dict[str, Tensor]:
    """Labels and split chunks as PyG's examples/distributed/pyg/partition_graph.py
    writes them; returns the masks of the nodes actually written."""
    (save_dir / f"{name}-label").mkdir()
    torch.save(y, save_dir / f"{name}-label" / "label.pt")
    written = {}
    for split in SPLITS:
        idx = torch.nonzero(masks[split]).view(-1)
        chunks = idx.split(idx.size(0) // num_parts)
        folder = save_dir / f"{name}-{split}-partitions"
        folder.mkdir()
        for i in range(num_parts):
            torch.save(chunks[i], folder / f"partition{i}.pt")
        written[split] = torch.zeros_like(masks[split])
        written[split][torch.cat(chunks[:num_parts])] = True
    return written


def build_pyg_folder(data: Union[Data, HeteroData], num_parts: int, save_dir: Path,
                     name: str, label_type: str, extras: bool = True) -> PygFolder:
    from torch_geometric.distributed import Partitioner as PygPartitioner
    from torch_geometric.loader.cluster import ClusterData

    root = save_dir / f"{name}-partitions"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ClusterData, "_metis", fake_metis)
        PygPartitioner(data, num_parts, str(root)).generate_partition()
    if isinstance(data, HeteroData):
        assignment = {t: torch.load(root / "node_map" / f"{t}.pt") for t in data.node_types}
        store = data[label_type]
    else:
        assignment = {HOMO_NODE: torch.load(root / "node_map.pt")}
        store = data
    masks = {}
    if extras:
        masks = write_extras(save_dir, name, store.y, {s: store[f"{s}_mask"] for s in SPLITS},
                             num_parts)
    return PygFolder(data, root, num_parts, assignment, label_type, masks)


@pytest.fixture(scope="session")
def pyg_homo(tmp_path_factory: pytest.TempPathFactory) -> PygFolder:
    return build_pyg_folder(homo_graph(), 3, tmp_path_factory.mktemp("pyg_homo"), "Toy",
                            HOMO_NODE)


@pytest.fixture(scope="session")
def pyg_hetero(tmp_path_factory: pytest.TempPathFactory) -> PygFolder:
    return build_pyg_folder(hetero_graph(), 2, tmp_path_factory.mktemp("pyg_hetero"), "Mag",
                            "paper")


def _typed(data: Union[Data, HeteroData]) -> tuple:
    if isinstance(data, HeteroData):
        return ({t: data[t] for t in data.node_types}, {et: data[et] for et in data.edge_types})
    return {HOMO_NODE: data}, {HOMO_EDGE: data}


def check_converted(src: PygFolder, out: Path, labels: bool = True) -> None:
    """The converted folder loads with our stores and holds exactly the original graph,
    each node in the partition PyG gave it, with the labels and split nodes of the extras;
    every file has the digest recorded for it (``pyg-dist-verify``'s check)."""
    meta = io.read_meta(out)
    report = verify_folder(out)
    assert not report.problems and report.files == 6 * meta.num_parts, report.problems
    hetero = meta.is_hetero
    assert meta.num_parts == src.num_parts and meta.method == "given"
    node_map = read_id_map(out)
    node_map = node_map if hetero else {HOMO_NODE: node_map}
    stores = [(LocalGraphStore.from_partition(out, p), LocalFeatureStore.from_partition(out, p))
              for p in range(src.num_parts)]
    nodes, edges = _typed(src.data)
    for t, orig in nodes.items():
        group = t if hetero else None
        for p, (gs, fs) in enumerate(stores):
            owned = gs.owned_nodes(group)
            old = node_map[t][owned]
            assert bool((src.assignment[t][old] == p).all()), (t, p)  # PyG's assignment
            x = fs.gather(t, "x", owned)  # relabelled ids
            assert torch.equal(x, orig.x[old]) and torch.equal(x[:, 0], old.float())
            if "time" in orig:
                assert torch.equal(fs.gather(t, "time", owned), orig.time[old])
            if labels and t == src.label_type:
                assert torch.equal(fs.gather(t, "y", owned), orig.y[old])
        if labels and t == src.label_type:
            for split, mask in src.masks.items():
                ids = torch.cat([fs.split_ids(split, group) for _, fs in stores])
                assert torch.equal(torch.sort(node_map[t][ids]).values,
                                   torch.nonzero(mask).view(-1)), split
    for et, orig in edges.items():
        group = et if hetero else None
        seen = []
        for gs, fs in stores:
            s, d = gs.csc_by_type[et].coo()  # relabelled ids
            eids = gs.csc_by_type[et].edge_ids()
            attr = fs.gather(et, "edge_attr", eids)
            old = attr[:, 0].long()  # the original edge id
            assert torch.equal(attr, orig.edge_attr[old])
            if "edge_time" in orig:
                assert torch.equal(fs.gather(et, "edge_time", eids), orig.edge_time[old])
            assert torch.equal(node_map[et[0]][s], orig.edge_index[0, old])
            assert torch.equal(node_map[et[2]][d], orig.edge_index[1, old])
            seen.append(old)
        assert torch.equal(torch.sort(torch.cat(seen)).values,
                           torch.arange(orig.edge_index.size(1))), edge_key(et)


@pytest.fixture
def checked() -> Callable[..., None]:
    return check_converted
