"""Tiny raw folders in the exact layouts PyG's and OGB's readers expect.

Each writer builds a 7-node graph whose features encode the node id (``x[i, 0] == i``),
so a test can check every row landed where it belongs.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Sequence

import numpy as np
import pytest
import scipy.sparse as sp

N = 7
SRC = np.array([0, 1, 2, 3, 4, 5, 6, 0, 2])
DST = np.array([1, 2, 3, 4, 5, 6, 0, 3, 5])
LABELS = np.array([0, 1, 2, 0, 1, 2, 0])
TRAIN, VAL, TEST = [0, 1, 2], [3, 4], [5, 6]


def features(dim: int = 3) -> np.ndarray:
    """``[N, dim]`` float32 rows whose first column is the node id."""
    x = np.arange(N * dim, dtype=np.float32).reshape(N, dim) / 100
    x[:, 0] = np.arange(N)
    return x


def write_reddit(root: Path) -> Path:
    """``root/raw/reddit_data.npz`` + ``reddit_graph.npz`` as PyG's ``Reddit`` reads them."""
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    node_types = np.array([1, 1, 1, 2, 2, 3, 3])  # 1 train, 2 val, 3 test
    np.savez(raw / "reddit_data.npz", feature=features(), label=LABELS, node_types=node_types)
    adj = sp.coo_matrix((np.ones(SRC.size), (SRC, DST)), shape=(N, N))
    sp.save_npz(raw / "reddit_graph.npz", adj)
    return root


def write_saint(root: Path, multilabel: bool = False) -> Path:
    """GraphSAINT's layout (``Flickr``, ``Yelp``, ``AmazonProducts``) under ``root/raw``."""
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    adj = sp.csr_matrix((np.ones(SRC.size), (SRC, DST)), shape=(N, N))
    sp.save_npz(raw / "adj_full.npz", adj)
    np.save(raw / "feats.npy", features())
    if multilabel:
        class_map = {str(i): [int(LABELS[i] == c) for c in range(3)] for i in range(N)}
    else:
        class_map = {str(i): int(LABELS[i]) for i in range(N)}
    (raw / "class_map.json").write_text(json.dumps(class_map))
    (raw / "role.json").write_text(json.dumps({"tr": TRAIN, "va": VAL, "te": TEST}))
    return root


def write_csv_gz(path: Path, rows: np.ndarray, fmt: str = "%d",
                 header: Sequence[str] = ()) -> None:
    """A gzip'ed comma-separated table (``header`` as its first line when given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    rows = rows.reshape(-1, 1) if rows.ndim == 1 else rows
    with gzip.open(path, "wt") as f:
        if header:
            f.write(",".join(header) + "\n")
        np.savetxt(f, rows, fmt=fmt, delimiter=",")


def write_splits(folder: Path) -> None:
    for name, ids in (("train", TRAIN), ("valid", VAL), ("test", TEST)):
        write_csv_gz(folder / f"{name}.csv.gz", np.array(ids))


def write_ogb_homo(root: Path, name: str = "ogbn-arxiv", split: str = "time",
                   year: bool = True) -> Path:
    """``root/<name_with_underscores>`` as ogb's ``PygNodePropPredDataset`` leaves it."""
    folder = root / name.replace("-", "_")
    raw = folder / "raw"
    write_csv_gz(raw / "edge.csv.gz", np.stack([SRC, DST], axis=1))
    write_csv_gz(raw / "num-node-list.csv.gz", np.array([N]))
    write_csv_gz(raw / "num-edge-list.csv.gz", np.array([SRC.size]))
    write_csv_gz(raw / "node-feat.csv.gz", features(), fmt="%.4f")
    write_csv_gz(raw / "node-label.csv.gz", LABELS)
    if year:
        write_csv_gz(raw / "node_year.csv.gz", 2000 + np.arange(N))
    write_splits(folder / "split" / split)
    (folder / "RELEASE_v1.txt").write_text("tiny test copy\n")
    return folder


MAG_TYPES = {"author": 3, "field_of_study": 2, "institution": 2, "paper": N}
MAG_EDGES: Dict[tuple, np.ndarray] = {
    ("author", "affiliated_with", "institution"): np.array([[0, 1, 2], [0, 1, 1]]),
    ("author", "writes", "paper"): np.array([[0, 0, 1, 2, 2], [0, 1, 2, 3, 6]]),
    ("paper", "cites", "paper"): np.stack([SRC, DST]),
    ("paper", "has_topic", "field_of_study"): np.array([[0, 3, 5], [0, 1, 1]]),
}


def write_ogb_mag(root: Path) -> Path:
    """``root/ogbn_mag`` in OGB's heterogeneous csv layout (labels and splits on paper)."""
    folder = root / "ogbn_mag"
    raw = folder / "raw"
    types = sorted(MAG_TYPES)
    write_csv_gz(raw / "num-node-dict.csv.gz", np.array([[MAG_TYPES[t] for t in types]]),
                 header=types)
    with gzip.open(raw / "triplet-type-list.csv.gz", "wt") as f:
        f.write("".join(",".join(t) + "\n" for t in MAG_EDGES))
    for i, (triplet, index) in enumerate(MAG_EDGES.items()):
        rel = raw / "relations" / "___".join(triplet)
        write_csv_gz(rel / "edge.csv.gz", index.T)
        write_csv_gz(rel / "num-edge-list.csv.gz", np.array([index.shape[1]]))
        write_csv_gz(rel / "edge_reltype.csv.gz", np.full(index.shape[1], i))
    write_csv_gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", features(), fmt="%.4f")
    write_csv_gz(raw / "node-feat" / "paper" / "node_year.csv.gz", 2000 + np.arange(N))
    flags = [[str(t == "paper") for t in types]]
    write_csv_gz(raw / "nodetype-has-label.csv.gz", np.array(flags), fmt="%s", header=types)
    write_csv_gz(raw / "node-label" / "paper" / "node-label.csv.gz", LABELS)
    split = folder / "split" / "time"
    write_csv_gz(split / "nodetype-has-split.csv.gz", np.array(flags), fmt="%s", header=types)
    write_splits(split / "paper")
    (folder / "RELEASE_v2.txt").write_text("tiny test copy\n")
    return folder


def files_under(folder: Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def raw() -> SimpleNamespace:
    """The writers above, for tests in this folder."""
    return SimpleNamespace(reddit=write_reddit, saint=write_saint, ogb_homo=write_ogb_homo,
                           ogb_mag=write_ogb_mag, files_under=files_under, N=N, SRC=SRC,
                           DST=DST, LABELS=LABELS, TRAIN=TRAIN, VAL=VAL, TEST=TEST,
                           features=features, MAG_TYPES=MAG_TYPES, MAG_EDGES=MAG_EDGES)
