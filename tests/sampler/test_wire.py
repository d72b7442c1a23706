"""Float32 attributes sent as bfloat16/float16: every remote value equals the float32
value rounded to the wire type, local rows are exact, and half the bytes travel."""
import asyncio

import numpy as np
import pytest
import torch

from pyg_dist.sampler import FeatureFetcher
from pyg_dist.sampler._wire import normalize, to_wire


def _fetch(fetcher, nodes, edges, unique=True):
    return asyncio.run(fetcher.fetch(nodes, edges, unique=unique))


def _owners(parted, kind, group, ids):
    book = parted.meta.node_book(group) if kind == "nodes" else parted.meta.edge_book(group)
    return torch.as_tensor(np.searchsorted(np.asarray(book.offsets), ids.numpy(), "right") - 1)


@pytest.mark.parametrize("wire", [torch.bfloat16, "fp16"])
def test_remote_rows_are_the_float32_rows_rounded(hetero_parted, wire):
    """Node ``x`` (float32) and edge ``w`` (float32) travel rounded; float64, uint8 and
    int64 attributes are untouched; rows this partition owns are never rounded."""
    meta, dtype = hetero_parted.meta, getattr(torch, normalize(wire))
    rng = np.random.default_rng(0)
    for part in (0, 1):
        group = hetero_parted.group(part)
        fetcher = FeatureFetcher(group, hetero_parted.samplers[part], meta, wire_dtype=wire)
        plain = FeatureFetcher(hetero_parted.group(part), hetero_parted.samplers[part], meta)
        nodes = {t: torch.from_numpy(rng.integers(0, meta.num_nodes[t], 80)) for t in meta.node_types}
        edges = {t: torch.from_numpy(rng.integers(0, meta.num_edges[t], 80)) for t in meta.edge_types}
        got = _fetch(fetcher, nodes, edges)
        exact = _fetch(plain, nodes, edges)
        rounded_any = False
        for kind, ids_by in (("nodes", nodes), ("edges", edges)):
            for t, ids in ids_by.items():
                remote = _owners(hetero_parted, kind, t, ids) != part
                assert remote.any() and (~remote).any()
                for attr, value in getattr(got, kind)[t].items():
                    want = hetero_parted.full(kind, t, attr)[ids]
                    assert value.dtype == want.dtype
                    assert torch.equal(getattr(exact, kind)[t][attr], want)
                    if want.dtype != torch.float32:
                        assert torch.equal(value, want), (kind, t, attr)
                        continue
                    assert torch.equal(value[~remote], want[~remote]), (kind, t, attr)
                    assert torch.equal(value[remote], want[remote].to(dtype).float())
                    rounded_any |= not torch.equal(value[remote], want[remote])
        assert rounded_any  # the rounding really happened (random floats are not exact)
        assert all(r.node_wire or r.edge_wire for _, r in group.calls)


def test_wire_bytes_are_halved(homo_parted):
    meta = homo_parted.meta
    (node_type,) = meta.node_types
    ids = torch.arange(meta.num_nodes[node_type])
    sizes = {}
    for wire in (None, "bf16"):
        fetcher = FeatureFetcher(homo_parted.group(0), homo_parted.samplers[0], meta,
                                 node_attrs={node_type: ["x"]}, edge_attrs={}, wire_dtype=wire)
        _fetch(fetcher, {node_type: ids}, {})
        sizes[wire] = fetcher.stats.reset()
    assert sizes[None].rows == sizes["bf16"].rows > 0
    assert sizes["bf16"].bytes * 2 == sizes[None].bytes


def test_per_attribute_choice_and_bad_specs(hetero_parted):
    meta, sampler = hetero_parted.meta, hetero_parted.samplers[0]
    fetcher = FeatureFetcher(hetero_parted.group(0), sampler, meta,
                             wire_dtype={("a", "x"): "bfloat16"})
    assert fetcher.wire == {("nodes", "a"): {"x": "bfloat16"}}
    by_name = FeatureFetcher(hetero_parted.group(0), sampler, meta, wire_dtype={"w": "half"})
    assert set(by_name.wire) == {("edges", t) for t in meta.edge_types}
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        FeatureFetcher(hetero_parted.group(0), sampler, meta, wire_dtype=torch.int8)
    with pytest.raises(ValueError, match="'flag'.*only float32"):
        FeatureFetcher(hetero_parted.group(0), sampler, meta, wire_dtype={"flag": "bf16"})
    with pytest.raises(ValueError, match="not fetched.*'nope'"):
        FeatureFetcher(hetero_parted.group(0), sampler, meta, wire_dtype={"nope": "bf16"})
    with pytest.raises(ValueError, match="only float32 rows"):
        to_wire(torch.zeros(2, dtype=torch.float64), "bfloat16")


def test_a_peer_sending_the_wrong_wire_type_is_refused(hetero_parted):
    """A response in float16 where bfloat16 was asked is named, never reinterpreted."""
    from pyg_dist.sampler._checks import RemoteResponseError

    def tamper(rank, request, response):
        for attrs in response.nodes.values():
            if "x" in attrs and attrs["x"].dtype == torch.bfloat16:
                attrs["x"] = attrs["x"].to(torch.float16)
        return response

    meta = hetero_parted.meta
    fetcher = FeatureFetcher(hetero_parted.group(0, tamper), hetero_parted.samplers[0], meta,
                             wire_dtype="bf16")
    with pytest.raises(RemoteResponseError, match="bfloat16"):
        _fetch(fetcher, {"a": torch.arange(meta.num_nodes["a"])}, {})
