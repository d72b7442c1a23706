"""PyG dataset classes by name: read from tiny raw folders, never downloading unasked."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch_geometric.datasets as pyg_datasets
from torch_geometric.data import Data, InMemoryDataset

from pyg_dist.datasets import _pyg_classes as pyg_classes
from pyg_dist.datasets import load_named
from pyg_dist.datasets import DatasetError, MissingRawFilesError

SAINT = ["Flickr", "Yelp", "AmazonProducts"]
RAW_FILES = {"Reddit": ["reddit_data.npz", "reddit_graph.npz"],
             **{name: ["adj_full.npz", "feats.npy", "class_map.json", "role.json"]
                for name in SAINT}}


def _write(raw, name: str, root: Path) -> Path:
    if name == "Reddit":
        return raw.reddit(root)
    return raw.saint(root, multilabel=name != "Flickr")


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every PyG download in these tests fails loudly (and is recorded)."""
    calls: list = []

    def refuse(self) -> None:
        calls.append(type(self).__name__)
        raise AssertionError(f"{type(self).__name__} tried to download")

    for name in ["Reddit", *SAINT, "Planetoid"]:
        monkeypatch.setattr(getattr(pyg_datasets, name), "download", refuse)
    return calls


def _edges(data: Data) -> set:
    return set(map(tuple, data.edge_index.t().tolist()))


@pytest.mark.parametrize("name", ["Reddit", *SAINT])
def test_reads_tiny_raw_folder(raw, tmp_path: Path, name: str) -> None:
    root = _write(raw, name, tmp_path / name)
    data = load_named(name.lower(), root)  # any case
    assert data.num_nodes == raw.N
    assert _edges(data) == set(zip(raw.SRC.tolist(), raw.DST.tolist()))
    assert torch.equal(data.x, torch.from_numpy(raw.features()))
    if name in ("Reddit", "Flickr"):
        assert data.y.tolist() == raw.LABELS.tolist()
    else:  # multi-label: one 0/1 column per class
        assert data.y.shape == (raw.N, 3) and data.y.argmax(1).tolist() == raw.LABELS.tolist()
    for split, ids in (("train", raw.TRAIN), ("val", raw.VAL), ("test", raw.TEST)):
        assert torch.nonzero(data[f"{split}_mask"]).view(-1).tolist() == ids
    assert (root / "processed").is_dir()  # PyG's own cache, in a writable root


@pytest.mark.parametrize("name", ["Reddit", *SAINT])
def test_every_missing_raw_file_is_named(raw, tmp_path: Path, name: str,
                                         no_downloads: list) -> None:
    for missing in RAW_FILES[name]:
        root = _write(raw, name, tmp_path / f"{name}-{missing}")
        (root / "raw" / missing).unlink()
        with pytest.raises(MissingRawFilesError) as info:
            load_named(name, root)
        message = str(info.value)
        assert missing in message and str(root / "raw") in message and "--download" in message
        assert len(message.splitlines()) == 1
        others = [f for f in RAW_FILES[name] if f != missing]
        assert not any(f in message for f in others)
        assert not (root / "processed").exists()
    assert no_downloads == []


def test_missing_root_names_every_file_and_creates_nothing(tmp_path: Path,
                                                           no_downloads: list) -> None:
    root = tmp_path / "absent" / "Reddit"
    with pytest.raises(MissingRawFilesError, match="reddit_data.npz, reddit_graph.npz"):
        load_named("Reddit", root)
    assert not (tmp_path / "absent").exists() and no_downloads == []


def test_processed_files_suffice_without_raw(raw, tmp_path: Path) -> None:
    root = raw.reddit(tmp_path / "Reddit")
    first = load_named("Reddit", root)
    for path in (root / "raw").iterdir():
        path.unlink()
    again = load_named("Reddit", root)  # PyG itself would download the raw files again
    assert torch.equal(first.x, again.x) and torch.equal(first.edge_index, again.edge_index)


def test_read_only_root_is_never_written(raw, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = raw.saint(tmp_path / "Flickr")
    before = raw.files_under(root)
    made = []
    real_mkdtemp = pyg_classes.tempfile.mkdtemp

    def mkdtemp(**kwargs) -> str:
        made.append(real_mkdtemp(dir=tmp_path, **kwargs))
        return made[-1]

    monkeypatch.setattr(pyg_classes, "_writable", lambda folder: False)
    monkeypatch.setattr(pyg_classes.tempfile, "mkdtemp", mkdtemp)
    with pytest.warns(UserWarning, match="not writable"):
        data = load_named("Flickr", root)
    assert data.num_nodes == raw.N and data.train_mask.sum() == len(raw.TRAIN)
    assert raw.files_under(root) == before and not (root / "processed").exists()
    assert len(made) == 1 and not os.path.exists(made[0])  # the temporary folder is gone


def test_writable_check_finds_nearest_existing_folder(tmp_path: Path) -> None:
    assert pyg_classes._writable(tmp_path / "a" / "b" / "processed")
    (tmp_path / "file").write_text("x")
    assert not pyg_classes._writable(tmp_path / "file" / "processed")


def test_download_only_when_asked(raw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_download(self) -> None:  # what PyG's download leaves in raw_dir
        calls.append(self.raw_dir)
        raw.reddit(Path(self.raw_dir).parent)

    monkeypatch.setattr(pyg_datasets.Reddit, "download", fake_download)
    root = tmp_path / "fetched"
    with pytest.raises(MissingRawFilesError):
        load_named("Reddit", root)
    assert calls == []
    data = load_named("Reddit", root, download=True)
    assert calls == [str(root / "raw")] and data.num_nodes == raw.N


def test_failed_download_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(self) -> None:
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(pyg_datasets.Reddit, "download", offline)
    with pytest.raises(DatasetError, match="Reddit: downloading or reading .* name resolution"):
        load_named("Reddit", tmp_path / "r", download=True)


def test_class_arguments(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"Amazon needs a name: pass --dataset Amazon:<name>"):
        load_named("Amazon", tmp_path)
    with pytest.raises(DatasetError, match="Reddit takes no name"):
        load_named("Reddit:big", tmp_path)
    with pytest.raises(DatasetError, match="--root is required for Reddit"):
        load_named("Reddit", None)
    with pytest.raises(MissingRawFilesError, match="Computers"):  # name reaches the class
        load_named("Amazon:Computers", tmp_path)
    with pytest.raises(DatasetError, match="unknown dataset 'Redit'.*did you mean Reddit"):
        load_named("Redit", tmp_path)


def test_class_without_root_or_raw_files() -> None:
    data = load_named("FakeDataset")  # synthetic PyG class: no root, nothing on disk
    assert isinstance(data, Data) and data.num_nodes > 0


def test_dataset_of_several_graphs_is_refused(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    class TwoGraphs(InMemoryDataset):
        def __init__(self, root: str) -> None:
            super().__init__(root)
            self._data, self.slices = self.collate([Data(x=torch.ones(2, 1)),
                                                    Data(x=torch.ones(3, 1))])

    monkeypatch.setattr(pyg_datasets, "TwoGraphs", TwoGraphs, raising=False)
    monkeypatch.setattr(pyg_datasets, "__all__", [*pyg_datasets.__all__, "TwoGraphs"])
    with pytest.raises(DatasetError, match="TwoGraphs holds 2 graphs"):
        load_named("TwoGraphs", tmp_path)


def test_planetoid_reader_writes_nothing(planetoid_root: Path) -> None:
    before = sorted(p for p in planetoid_root.rglob("*"))
    data = load_named("Cora", planetoid_root)
    assert data.num_nodes == 2708 and data.y.dim() == 1
    assert sorted(p for p in planetoid_root.rglob("*")) == before


def test_planetoid_download_only_when_asked(planetoid_root: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    calls = []

    def fake_download(self) -> None:  # PyG's Planetoid fetches into root/<Name>/raw
        calls.append(self.raw_dir)
        shutil.copytree(planetoid_root / "Cora" / "raw", self.raw_dir, dirs_exist_ok=True)

    monkeypatch.setattr(pyg_datasets.Planetoid, "download", fake_download)
    root = tmp_path / "planetoid"
    with pytest.raises(DatasetError, match="does not exist"):
        load_named("Cora", root)
    (root / "Cora").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="ind.cora.x is missing.*--download"):
        load_named("Cora", root)
    data = load_named("cora", root, download=True)
    assert calls == [str(root / "Cora" / "raw")]
    assert data.num_nodes == 2708 and int(data.train_mask.sum()) == 140


class _Payload:
    """Pickled into a fake processed file: unpickling it would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_processed_file_is_never_unpickled(raw, tmp_path: Path) -> None:
    root = raw.reddit(tmp_path / "Reddit")
    load_named("Reddit", root)  # writes processed/
    processed = next((root / "processed").glob("data*.pt"))
    marker = tmp_path / "code_ran"
    torch.save((_Payload(marker), {}, Data), processed)
    with pytest.raises(DatasetError, match="cannot be loaded safely") as info:
        load_named("Reddit", root)
    assert str(processed) in str(info.value) and "\n" not in str(info.value)
    assert not marker.exists()  # PyG's own loader would have fallen back to pickle


def test_damaged_processed_file_is_named(raw, tmp_path: Path) -> None:
    root = raw.reddit(tmp_path / "Reddit")
    load_named("Reddit", root)
    processed = next((root / "processed").glob("data*.pt"))
    processed.write_bytes(processed.read_bytes()[:100])
    with pytest.raises(DatasetError, match="damaged") as info:
        load_named("Reddit", root)
    assert str(processed) in str(info.value)
