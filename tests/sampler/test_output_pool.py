"""The output pool reuses a buffer only once nothing outside it holds its memory."""
import pickle

import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions)
from multiprocessing.reduction import ForkingPickler

from pyg_dist.sampler._buffers import MIN_BYTES, OutputPool

ROWS, WIDTH = 4096, 100  # 1.6 MB of float32: above MIN_BYTES


def test_a_buffer_is_reused_once_its_batch_is_gone() -> None:
    pool = OutputPool()
    a = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    ptr = a.data_ptr()
    del a
    b = pool.empty("x", ROWS - 10, (WIDTH,), torch.float32)
    assert b.data_ptr() == ptr and b.shape == (ROWS - 10, WIDTH)
    assert (pool.reused, pool.allocated) == (1, 1)


def test_a_buffer_still_held_is_never_handed_out_again() -> None:
    pool = OutputPool()
    a = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    a.fill_(1.0)
    b = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    assert b.data_ptr() != a.data_ptr()
    b.fill_(2.0)
    assert bool((a == 1.0).all())


def test_a_view_kept_by_the_training_loop_keeps_the_buffer_busy() -> None:
    pool = OutputPool()
    a = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    kept = a[:10]  # e.g. the seeds' rows kept after the batch is dropped
    kept.fill_(3.0)
    view_of_numpy = a.numpy()[20:30]
    del a
    for _ in range(3):
        out = pool.empty("x", ROWS, (WIDTH,), torch.float32)
        out.fill_(-1.0)
        del out
    assert bool((kept == 3.0).all())
    assert view_of_numpy.base is not None
    del kept, view_of_numpy
    assert pool.empty("x", ROWS, (WIDTH,), torch.float32) is not None


def test_a_buffer_sent_to_another_process_is_not_reused() -> None:
    pool = OutputPool()
    a = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    a.fill_(5.0)
    data = ForkingPickler.dumps(a)  # moves its storage to shared memory, as a pipe does
    received = pickle.loads(data)  # the receiver maps the same pages
    del a
    b = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    b.fill_(7.0)
    assert bool((received == 5.0).all())
    assert not any(buf.is_shared() for buf in pool._bufs["x"])


def test_small_outputs_and_other_keys_get_their_own_memory() -> None:
    pool = OutputPool(keep=2)
    small = pool.empty("y", 10, (), torch.int64)
    assert small.numel() * 8 < MIN_BYTES and pool.allocated == 0
    a = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    ptr = a.data_ptr()
    del a
    other = pool.empty("x2", ROWS, (WIDTH,), torch.float32)
    wider = pool.empty("x", ROWS, (WIDTH + 1,), torch.float32)
    assert ptr not in (other.data_ptr(), wider.data_ptr())
    bigger = pool.empty("x", 2 * ROWS, (WIDTH,), torch.float32)  # the free one is too small
    assert bigger.data_ptr() != ptr and len(pool._bufs["x"]) <= 2


def test_a_free_buffer_after_a_held_one_makes_room_for_a_bigger_one() -> None:
    """The pool is full, its oldest buffer is still held and a later one is free: the
    free one is dropped for a bigger buffer (buffers are told apart by identity, never
    by comparing their values)."""
    pool = OutputPool(keep=2)
    held = pool.empty("x", ROWS, (WIDTH,), torch.float32)
    freed = pool.empty("x", ROWS - 7, (WIDTH,), torch.float32)
    del freed
    bigger = pool.empty("x", 2 * ROWS, (WIDTH,), torch.float32)
    kept = pool._bufs["x"]
    assert len(kept) == 2 and kept[0].data_ptr() == held.data_ptr()
    assert kept[1].data_ptr() == bigger.data_ptr()
