"""OGB node datasets through the ogb package's own readers, from tiny raw folders."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_dist.datasets import _ogb_nodes as ogb_nodes
from pyg_dist.datasets import load_named
from pyg_dist.datasets._errors import DatasetError, MissingDependencyError, MissingRawFilesError

pytest.importorskip("ogb", reason="the OGB readers need `pip install ogb`")


def _mask_ids(mask: torch.Tensor) -> list:
    return torch.nonzero(mask).view(-1).tolist()


def test_arxiv(raw, tmp_path: Path) -> None:
    folder = raw.ogb_homo(tmp_path, "ogbn-arxiv")
    before = raw.files_under(folder)
    data = load_named("ogbn-arxiv", tmp_path)
    assert data.num_nodes == raw.N
    assert data.edge_index.tolist() == [raw.SRC.tolist(), raw.DST.tolist()]  # directed
    assert torch.allclose(data.x, torch.from_numpy(raw.features()), atol=1e-4)
    assert data.y.dtype == torch.long and data.y.tolist() == raw.LABELS.tolist()  # 1-D
    assert data.node_year.view(-1).tolist() == list(range(2000, 2000 + raw.N))
    assert _mask_ids(data.train_mask) == raw.TRAIN and _mask_ids(data.val_mask) == raw.VAL
    assert _mask_ids(data.test_mask) == raw.TEST
    assert raw.files_under(folder) == before  # nothing written (no processed/ pickle)


def test_products_adds_inverse_edges(raw, tmp_path: Path) -> None:
    raw.ogb_homo(tmp_path, "ogbn-products", split="sales_ranking", year=False)
    data = load_named("OGBN-Products", tmp_path)  # any case
    edges = set(map(tuple, data.edge_index.t().tolist()))
    pairs = set(zip(raw.SRC.tolist(), raw.DST.tolist()))
    assert data.edge_index.size(1) == 2 * raw.SRC.size
    assert edges == pairs | {(d, s) for s, d in pairs}
    assert data.y.dim() == 1 and _mask_ids(data.train_mask) == raw.TRAIN


def test_root_may_name_the_dataset_folder(raw, tmp_path: Path) -> None:
    folder = raw.ogb_homo(tmp_path, "ogbn-arxiv")
    assert load_named("ogbn-arxiv", folder).num_nodes == raw.N


def test_mag_is_heterogeneous(raw, tmp_path: Path) -> None:
    raw.ogb_mag(tmp_path)
    data = load_named("ogbn-mag", tmp_path)
    assert isinstance(data, HeteroData)
    assert {t: data[t].num_nodes for t in data.node_types} == raw.MAG_TYPES
    for triplet, index in raw.MAG_EDGES.items():
        assert data[triplet].edge_index.tolist() == index.tolist()
        assert data[triplet].edge_reltype.numel() == index.shape[1]
    paper = data["paper"]
    assert torch.allclose(paper.x, torch.from_numpy(raw.features()), atol=1e-4)
    assert paper.y.dim() == 1 and paper.y.tolist() == raw.LABELS.tolist()
    assert _mask_ids(paper.train_mask) == raw.TRAIN and _mask_ids(paper.test_mask) == raw.TEST
    assert "y" not in data["author"] and "train_mask" not in data["author"]


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-mag"])
def test_every_missing_file_is_named(raw, tmp_path: Path, name: str) -> None:
    write = raw.ogb_mag if name == "ogbn-mag" else raw.ogb_homo
    names = raw.files_under(write(tmp_path / "full"))
    per_type = ("raw/node-feat/", "edge_reltype")  # mag: see the test below
    needed = [n for n in names if not n.startswith("RELEASE")
              and not (name == "ogbn-mag" and any(p in n for p in per_type))]
    assert len(needed) >= 9
    for i, missing in enumerate(needed):
        root = tmp_path / f"r{i}"
        folder = write(root)
        (folder / missing).unlink()
        with pytest.raises(MissingRawFilesError) as info:
            load_named(name, root)
        message = str(info.value)
        assert missing in message and str(folder) in message and "--download" in message, missing
        assert len(message.splitlines()) == 1


@pytest.mark.parametrize("pattern", ["raw/node-feat/*/node-feat.csv.gz",
                                     "raw/node-feat/*/node_year.csv.gz",
                                     "raw/relations/*/edge_reltype.csv.gz"])
def test_per_type_files_need_one_type(raw, tmp_path: Path, pattern: str) -> None:
    folder = raw.ogb_mag(tmp_path)
    for path in folder.glob(pattern):
        path.unlink()
    with pytest.raises(MissingRawFilesError, match=pattern.replace("*", r"\*")):
        load_named("ogbn-mag", tmp_path)


def test_missing_folder_lists_expected_layout(tmp_path: Path) -> None:
    with pytest.raises(MissingRawFilesError) as info:
        load_named("ogbn-arxiv", tmp_path / "nowhere")
    message = str(info.value)
    assert str(tmp_path / "nowhere" / "ogbn_arxiv") in message
    for name in ("raw/edge.csv.gz", "raw/node-feat.csv.gz", "split/time/train.csv.gz"):
        assert name in message
    assert not (tmp_path / "nowhere").exists()


def test_download_only_when_asked(raw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ogb.utils import url as ogb_url

    source = tmp_path / "source"
    shutil.move(str(raw.ogb_homo(tmp_path / "build", "ogbn-arxiv")), str(source / "arxiv"))
    calls = []

    def fake_download(url: str, folder: str, log: bool = True) -> str:
        calls.append(url)
        return shutil.make_archive(str(Path(folder) / "arxiv"), "zip", source)

    monkeypatch.setattr(ogb_url, "download_url", fake_download)
    root = tmp_path / "data"
    with pytest.raises(MissingRawFilesError):
        load_named("ogbn-arxiv", root)
    assert calls == []
    data = load_named("ogbn-arxiv", root, download=True)
    assert calls == ["http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"]
    assert data.num_nodes == raw.N and (root / "ogbn_arxiv" / "raw" / "edge.csv.gz").is_file()
    assert not (root / "arxiv.zip").exists()


def test_failed_download_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ogb.utils import url as ogb_url

    def offline(url: str, folder: str, log: bool = True) -> str:
        raise OSError("network unreachable")

    monkeypatch.setattr(ogb_url, "download_url", offline)
    with pytest.raises(DatasetError, match="downloading ogbn-arxiv from .* network unreachable"):
        load_named("ogbn-arxiv", tmp_path, download=True)


def test_papers100m_needs_the_chunked_path(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="not implemented yet: write it as a chunked folder.*--memory-budget"):
        load_named("ogbn-papers100M", tmp_path)


def test_unknown_ogb_name(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="unknown OGB node dataset 'ogbn-nope'.*ogbn-arxiv"):
        load_named("ogbn-nope", tmp_path)


def test_missing_ogb_package_is_one_line(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ogb.io.read_graph_raw", None)
    with pytest.raises(MissingDependencyError, match="pip install ogb") as info:
        load_named("ogbn-arxiv", tmp_path)
    assert len(str(info.value).splitlines()) == 1


def test_no_version_check_on_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "outdated", raising=False)
    with ogb_nodes._no_version_check():
        with pytest.raises(ImportError):
            import outdated  # noqa: F401  # ogb's PyPI check cannot start
    assert "outdated" not in sys.modules
