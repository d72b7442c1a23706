"""SparseAdagrad / SparseAdam in one process against the formulas, written out here."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

from pyg_dist.embedding import CheckpointError, DistEmbedding, SparseAdagrad, SparseAdam

N, D = 12, 3


def _batches(steps: int, seed: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """Per step: ids with duplicates (id 0 always twice) and the gradient of each row."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        ids = torch.cat([torch.tensor([0, 0]), torch.randint(0, N, (7,), generator=gen)])
        out.append((ids, torch.randn(ids.numel(), D, generator=gen)))
    return out


def _mean_by_id(ids: torch.Tensor, grads: torch.Tensor) -> Dict[int, List[float]]:
    """Duplicates of an id are averaged."""
    sums: Dict[int, List[float]] = {}
    counts: Dict[int, int] = {}
    for i, g in zip(ids.tolist(), grads.tolist()):
        sums[i] = [a + b for a, b in zip(sums.get(i, [0.0] * D), g)]
        counts[i] = counts.get(i, 0) + 1
    return {i: [x / counts[i] for x in s] for i, s in sums.items()}


def _reference_adagrad(w: List[List[float]], batches, lr: float, eps: float) -> List[List[float]]:
    state = [[0.0] * D for _ in range(N)]
    for ids, grads in batches:
        for i, g in _mean_by_id(ids, grads).items():
            for k in range(D):
                state[i][k] += g[k] * g[k]
                w[i][k] -= lr * g[k] / (math.sqrt(state[i][k]) + eps)
    return w


def _reference_adam(w: List[List[float]], batches, lr: float, betas, eps: float):
    b1, b2 = betas
    m = [[0.0] * D for _ in range(N)]
    v = [[0.0] * D for _ in range(N)]
    step = [0] * N
    for ids, grads in batches:
        for i, g in _mean_by_id(ids, grads).items():
            step[i] += 1
            for k in range(D):
                m[i][k] = b1 * m[i][k] + (1 - b1) * g[k]
                v[i][k] = b2 * v[i][k] + (1 - b2) * g[k] * g[k]
                m_hat = m[i][k] / (1 - b1 ** step[i])
                v_hat = v[i][k] / (1 - b2 ** step[i])
                w[i][k] -= lr * m_hat / (math.sqrt(v_hat) + eps)
    return w, step


def _train(emb: DistEmbedding, opt, batches) -> None:
    for ids, grads in batches:
        opt.zero_grad()
        half = ids.numel() // 2  # two lookups per step, like two layers using the table
        loss = (emb(ids[:half]) * grads[:half]).sum() + (emb(ids[half:]) * grads[half:]).sum()
        loss.backward()
        opt.step()


def _init(shape, dtype) -> torch.Tensor:
    return torch.arange(shape[0] * shape[1], dtype=dtype).view(shape) / 10


@pytest.mark.parametrize("kind", ["adagrad", "adam"])
def test_matches_formulas_step_by_step(kind: str) -> None:
    batches = _batches(4, seed=3)
    emb = DistEmbedding(N, D, name=f"formula_{kind}", init_func=_init)
    w = _init((N, D), torch.float32).tolist()
    if kind == "adagrad":
        opt = SparseAdagrad([emb], lr=0.3, eps=1e-10)
    else:
        opt = SparseAdam(emb, lr=0.05, betas=(0.8, 0.95), eps=1e-8)
    for s in range(len(batches)):
        _train(emb, opt, batches[s:s + 1])
        if kind == "adagrad":
            expected = _reference_adagrad([r[:] for r in w], batches[:s + 1], 0.3, 1e-10)
        else:
            expected, steps = _reference_adam([r[:] for r in w], batches[:s + 1], 0.05,
                                              (0.8, 0.95), 1e-8)
            assert opt.state[emb.name]["step"][torch.arange(N)].tolist() == steps
        torch.testing.assert_close(emb.weight[torch.arange(N)], torch.tensor(expected),
                                   rtol=1e-5, atol=1e-6)


def test_zero_grad_and_recording() -> None:
    emb = DistEmbedding(N, D, name="zero_grad_table", init_func=_init)
    opt = SparseAdagrad(emb, lr=0.1)
    before = emb.weight[torch.arange(N)]
    emb(torch.tensor([1, 2])).sum().backward()
    opt.zero_grad()
    opt.step()  # the gradient was cleared: nothing changes
    assert torch.equal(emb.weight[torch.arange(N)], before)
    out = emb(torch.tensor([3]))
    assert out.requires_grad and out.is_leaf
    opt.zero_grad()  # between forward and backward, as with torch: the lookup stays
    out.sum().backward()
    opt.step()
    changed = (emb.weight[torch.arange(N)] != before).any(dim=1).nonzero().view(-1)
    assert changed.tolist() == [3]
    with torch.no_grad():
        assert not emb(torch.tensor([4])).requires_grad
    opt.zero_grad()
    assert len(emb._trace) == 0


def test_optimizer_rejects_other_params() -> None:
    with pytest.raises(TypeError, match="optimizes pyg_dist DistEmbedding tables, got "
                                        "torch.nn.modules.sparse.Embedding"):
        SparseAdam(torch.nn.Embedding(4, 2, sparse=True), lr=0.1)
    with pytest.raises(TypeError, match="SparseAdagrad optimizes pyg_dist DistEmbedding "
                                        "tables, got torch.nn.parameter.Parameter"):
        SparseAdagrad(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    emb = DistEmbedding(4, 2, name="reject_table")
    with pytest.raises(ValueError, match="lr must be positive"):
        SparseAdam(emb, lr=0.0)
    with pytest.raises(ValueError, match="betas must be two values"):
        SparseAdam(emb, lr=0.1, betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="empty list of embeddings"):
        SparseAdam([], lr=0.1)


def test_checkpoint_roundtrip_restores_rows_state_and_lr(tmp_path: Path) -> None:
    emb = DistEmbedding(N, D, name="ckpt_table", init_func=_init)
    opt = SparseAdam(emb, lr=0.05, betas=(0.7, 0.9), eps=1e-6)
    _train(emb, opt, _batches(2, seed=5))
    emb.save(tmp_path / "emb")
    opt.save(tmp_path / "opt")
    version = (tmp_path / "emb" / "LATEST").read_text().strip()
    assert (tmp_path / "emb" / version / "info.json").is_file()
    rows = emb.weight[torch.arange(N)]
    states = {k: t[torch.arange(N)] for k, t in opt.state[emb.name].items()}
    emb.weight[torch.arange(N)] = torch.zeros(N, D)
    opt2 = SparseAdam(emb, lr=1.0)
    for tensor in opt2.state[emb.name].values():  # same names: the same state tensors
        tensor[torch.arange(N)] = torch.zeros(tensor.shape, dtype=tensor.dtype)
    emb.load(tmp_path / "emb")
    opt2.load(tmp_path / "opt")
    assert torch.equal(emb.weight[torch.arange(N)], rows)
    for key, value in states.items():
        assert torch.equal(opt2.state[emb.name][key][torch.arange(N)], value)
    assert (opt2.lr, opt2.betas, opt2.eps) == (0.05, (0.7, 0.9), 1e-6)
    with pytest.raises(CheckpointError, match=r"has no entry 'optimizer\.ckpt_table' \(it "
                                              r"holds 'embedding\.ckpt_table' \(stateful "
                                              r"DistEmbedding\)\)"):
        opt2.load(tmp_path / "emb")
    with pytest.raises(CheckpointError, match="holds no pyg_dist checkpoint"):
        emb.load(tmp_path / "missing")
    other = DistEmbedding(N, D + 1, name="ckpt_other")
    with pytest.raises(CheckpointError, match="has no entry 'embedding.ckpt_other'"):
        other.load(tmp_path / "emb")
