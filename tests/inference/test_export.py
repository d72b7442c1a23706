"""Export: every node's row once, by original id, equal to the in-memory result; the
folder appears whole or not at all; the reader rejects malformed folders."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch
import torch.distributed as dist

from infer_models import build, references
from pyg_dist import DistContext, LocalFeatureStore, LocalGraphStore, Partitioner, shutdown_rpc
from pyg_dist.inference import ExportFormatError, export, layerwise, read_export
from pyg_dist.format import _partition_io as io
from pyg_dist.testing import run_ranks
from pyg_dist.testing._launch import process_context


def _stores(root: Path, pid: int = 0):
    return (LocalFeatureStore.from_partition(root, pid), LocalGraphStore.from_partition(root, pid))


@pytest.fixture(scope="module")
def cora1(cora, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora1x")
    Partitioner(cora, 1, root, seed=0, progress=False).generate()
    return cora, root


def _joined(out: Path, num_nodes: int) -> np.ndarray:
    exported = read_export(out)
    assert list(exported) == ["_N"]
    ids, values = exported["_N"]
    assert ids.dtype == np.int64 and values.dtype == np.float32
    assert np.array_equal(np.sort(ids), np.arange(num_nodes))  # one row per node
    joined = np.empty_like(values)
    joined[ids] = values
    return joined


def test_one_process_round_trip(cora1, tmp_path):
    data, root = cora1
    result = layerwise(build("sage", data.num_features), _stores(root), progress=False)
    out = export(result, root, tmp_path / "exp")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == {"format": "pyg_dist-export", "version": 1, "node_types": {"_N": [
        {"ids": "_N/part_0.ids.npy", "values": "_N/part_0.values.npy"}]}}
    expected = references(data, ["sage"])["sage"].numpy()
    assert np.allclose(_joined(out, data.num_nodes), expected, atol=1e-5)
    with pytest.raises(FileExistsError, match="exp"):
        export(result, root, out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no markers left


def test_parquet_beside_npy(cora1, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    data, root = cora1
    result = layerwise(build("gcn", data.num_features), _stores(root), progress=False)
    out = export(result, root, tmp_path / "exp", format="parquet")
    entry = json.loads((out / "manifest.json").read_text())["node_types"]["_N"][0]
    assert entry["parquet"] == "_N/part_0.parquet"
    ids, values = read_export(out)["_N"]  # the .npy pair is still the contract
    table = pq.read_table(out / entry["parquet"])
    assert table.column_names == ["id", "values"]
    assert np.array_equal(table.column("id").to_numpy(), ids)
    assert np.array_equal(np.stack(table.column("values").to_numpy(zero_copy_only=False)),
                          values)
    with pytest.raises(ValueError, match="format must be one of"):
        export(result, root, tmp_path / "exp2", format="csv")


def test_hetero_round_trip(hetero_graph, tmp_path):
    from infer_models import build_hetero, hetero_references

    root = tmp_path / "parts"
    Partitioner(hetero_graph, 1, root, seed=0, progress=False).generate()
    result = layerwise(build_hetero("sage_res", hetero_graph.metadata()), _stores(root),
                       progress=False)
    out = export(result, root, tmp_path / "exp")
    exported = read_export(out)
    expected = hetero_references(hetero_graph, ["sage_res"])["sage_res"]
    assert sorted(exported) == sorted(expected)
    for node_type, (ids, values) in exported.items():
        assert np.array_equal(np.sort(ids), np.arange(hetero_graph[node_type].num_nodes))
        joined = np.empty_like(values)
        joined[ids] = values
        assert np.allclose(joined, expected[node_type].numpy(), atol=1e-5), node_type
    with pytest.raises(ValueError, match="heterogeneous: result must be a dict"):
        export(result["paper"], root, tmp_path / "exp2")


def test_failed_export_leaves_previous(cora1, tmp_path, monkeypatch):
    data, root = cora1
    result = layerwise(build("gin", data.num_features), _stores(root), progress=False)
    out = export(result, root, tmp_path / "exp")
    before = read_export(out)["_N"][1].copy()
    result.local_data.zero_()

    def failing_save(*args, **kwargs):
        raise OSError("disk full (injected)")
    monkeypatch.setattr(np.lib.format, "open_memmap", failing_save)
    with pytest.raises(OSError, match="injected"):
        export(result, root, out, overwrite=True)
    monkeypatch.undo()
    assert np.array_equal(read_export(out)["_N"][1], before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def _export_then_die(root: str, out: str) -> None:
    """In a child process: an export over ``out`` killed (exit code 9) right after its
    first file, as a SIGKILL would leave it."""
    os.environ["WORLD_SIZE"] = "1"
    result = layerwise(build("gin", 1433), _stores(Path(root)), progress=False)
    real = np.save

    def save_then_die(path, *args, **kwargs):
        real(path, *args, **kwargs)
        os._exit(9)  # killed after the first file of the new export

    np.save = save_then_die
    export(result, root, out, overwrite=True)


@pytest.mark.multiprocess
def test_killed_export_leaves_previous(cora1, tmp_path):
    data, root = cora1
    result = layerwise(build("sage", data.num_features), _stores(root), progress=False)
    out = export(result, root, tmp_path / "exp")
    before = read_export(out)["_N"][1].copy()
    # forked from the warm fork server: a fresh interpreter only added ~10 s of imports
    child = process_context("forkserver").Process(target=_export_then_die,
                                                  args=(str(root), str(out)))
    child.start()
    child.join(120)
    if child.exitcode is None:
        child.kill()
        child.join()
        pytest.fail("the export did not end in 120 s")
    assert child.exitcode == 9, child.exitcode
    assert np.array_equal(read_export(out)["_N"][1], before)  # still the previous export
    again = export(result, root, out, overwrite=True)  # the leftover is cleaned up
    assert np.array_equal(read_export(again)["_N"][1], before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def _write(root: Path, manifest, files: Dict[str, np.ndarray]) -> Path:
    root.mkdir()
    for rel, array in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(root / rel, array)
    (root / "manifest.json").write_text(manifest if isinstance(manifest, str)
                                        else json.dumps(manifest))
    return root


def _manifest(pairs, version=1):
    return {"format": "pyg_dist-export", "version": version, "node_types": {"_N": pairs}}


GOOD = {"a.npy": np.arange(3, dtype=np.int64), "b.npy": np.ones((3, 2), np.float32)}


@pytest.mark.parametrize("manifest, files, match", [
    ("{not json", GOOD, "not valid JSON"),
    (_manifest([{"ids": "a.npy", "values": "b.npy"}], version=2), GOOD, "version 2"),
    (_manifest([{"ids": "../a.npy", "values": "b.npy"}]), GOOD, "stay inside"),
    (_manifest([{"ids": "/etc/passwd", "values": "b.npy"}]), GOOD, "stay inside"),
    (_manifest([{"ids": "a.npy"}]), GOOD, "'ids' and 'values'"),
    (_manifest([{"ids": "a.npy", "values": "c.npy"}]), GOOD, "c.npy is missing"),
    (_manifest([{"ids": "b.npy", "values": "b.npy"}]), GOOD, "1-D int64"),
    (_manifest([{"ids": "a.npy", "values": "c.npy"}]),
     {**GOOD, "c.npy": np.ones((2, 2), np.float32)}, "2 rows but"),
    (_manifest([{"ids": "a.npy", "values": "b.npy"}, {"ids": "a.npy", "values": "b.npy"}]),
     GOOD, "more than once"),
    (_manifest([{"ids": "a.npy", "values": "c.npy"}]),
     {**GOOD, "c.npy": np.array([{"x": 1}] * 3, dtype=object)}, "plain .npy"),
])
def test_reader_rejects_malformed(tmp_path, manifest, files, match):
    root = _write(tmp_path / "exp", manifest, files)
    with pytest.raises(ExportFormatError, match=match):
        read_export(root)


def test_reader_rejects_link_out_of_folder(tmp_path):
    np.save(tmp_path / "outside.npy", np.arange(3, dtype=np.int64))
    root = _write(tmp_path / "exp", _manifest([{"ids": "a.npy", "values": "b.npy"}]), GOOD)
    (root / "a.npy").unlink()
    (root / "a.npy").symlink_to(tmp_path / "outside.npy")
    with pytest.raises(ExportFormatError, match="leaves the export folder"):
        read_export(root)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(chunk=-1), ValueError, r"chunk must be an integer >= 1, got -1"),
    (dict(chunk=0), ValueError, r"chunk must be an integer >= 1, got 0"),
    (dict(chunk=2.5), TypeError, r"chunk must be an integer >= 1, got float 2.5"),
    (dict(overwrite="yes"), TypeError, r"overwrite must be True or False, got str 'yes'"),
])
def test_bad_export_arguments_are_refused(cora1, tmp_path, kwargs, error, match):
    data, root = cora1
    result = layerwise(build("sage", data.num_features), _stores(root), progress=False)
    with pytest.raises(error, match=match):
        export(result, root, tmp_path / "exp", **kwargs)
    assert not (tmp_path / "exp").exists()  # nothing written (chunk=-1 wrote zero rows)


def test_two_exports_into_one_folder_never_both_succeed(cora1, tmp_path, monkeypatch):
    """Both jobs pass the "out does not exist yet" check before either renames its
    folder in (a barrier in the test holds them there): exactly one may succeed, the
    other is refused naming the folder, and the folder holds the winner's rows."""
    import threading

    from pyg_dist.format import _leftovers as leftovers

    data, root = cora1
    results = [layerwise(build(m, data.num_features), _stores(root), progress=False)
               for m in ("sage", "gcn")]
    expected = [_joined(export(r, root, tmp_path / f"ref{i}"), data.num_nodes)
                for i, r in enumerate(results)]
    claim, both_checked = leftovers.claim, threading.Barrier(2, timeout=60)

    def claim_together(out, *args):
        both_checked.wait()
        return claim(out, *args)
    monkeypatch.setattr(leftovers, "claim", claim_together)
    for round_ in range(5):
        out, outcome = tmp_path / f"exp{round_}", [None, None]

        def job(i):
            try:
                export(results[i], root, out)
                outcome[i] = "ok"
            except FileExistsError as exc:
                outcome[i] = str(exc)
        threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(outcome, key=str).count("ok") == 1, outcome
        winner = outcome.index("ok")
        assert str(out) in outcome[1 - winner] and "\n" not in outcome[1 - winner]
        assert np.allclose(_joined(out, data.num_nodes), expected[winner])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left


def test_reader_rejects_manifest_linked_from_outside(tmp_path):
    outside = _write(tmp_path / "other", _manifest([{"ids": "a.npy", "values": "b.npy"}]),
                     GOOD)
    root = _write(tmp_path / "exp", "{}", GOOD)
    (root / "manifest.json").unlink()
    (root / "manifest.json").symlink_to(outside / "manifest.json")
    with pytest.raises(ExportFormatError, match=r"manifest.json is a link to .* outside"):
        read_export(root)


# ---- multi-process ----------------------------------------------------------------
def _job(root: str, out: str, world_per_part: int) -> None:
    ctx = DistContext.from_env(rpc_timeout=60)
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size)
    num_parts = io.read_meta(Path(root)).num_parts
    data = _stores(Path(root), ctx.partition_id(num_parts))
    result = layerwise(build("gat", int(data[0].get_tensor_size(None, "x")[1])), data,
                       batch_size=256, progress=False, ctx=ctx)
    export(result, root, out, ctx=ctx)
    shutdown_rpc()


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("parts, world", [(2, 2), (3, 3), (1, 2)])
def test_distributed_round_trip(cora, tmp_path, parts, world):
    root = tmp_path / "parts"
    Partitioner(cora, parts, root, seed=0, progress=False).generate()
    run_ranks(_job, world, str(root), str(tmp_path / "exp"), world // parts, timeout=240)
    manifest = json.loads((tmp_path / "exp" / "manifest.json").read_text())
    assert len(manifest["node_types"]["_N"]) == parts  # one file pair per partition
    expected = references(cora, ["gat"])["gat"].numpy()
    assert np.allclose(_joined(tmp_path / "exp", cora.num_nodes), expected, atol=1e-5)
