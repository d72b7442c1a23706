"""Reads through data addresses inside numba kernels.

A kernel that reads several partitions' arrays in one loop (:mod:`pyg_dist.sampler._joint_hop`)
takes their data addresses in one int64 array instead of a tuple of arrays: a tuple
indexed at run time costs a dispatch per access, and one kernel signature serves any
number of partitions and any mix of int32 and int64 arrays. Like numba's own array
indexing these reads are not bounds-checked: the caller checks every position it reads
against the arrays it took the addresses of, and keeps those arrays alive.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_JIT = dict(cache=True, nogil=True)


def _loader(bits: int):
    """An intrinsic ``load(address, i)``: the ``i``-th ``bits``-bit signed integer of
    the array whose data starts at ``address``, as int64."""
    @intrinsic
    def load(typingctx, address, i):
        def codegen(context, builder, signature, args):
            ty, i64 = ir.IntType(bits), ir.IntType(64)
            at = builder.add(args[0], builder.mul(args[1], i64(bits // 8)))
            value = builder.load(builder.inttoptr(at, ty.as_pointer()))
            return builder.sext(value, i64) if bits < 64 else value
        return types.int64(types.int64, types.int64), codegen
    return load


load64, load32 = _loader(64), _loader(32)


def emit_prefetch(builder, pointer) -> None:
    """Emits LLVM's prefetch of the byte at ``pointer`` (an ``i8*``): read, keep in all
    cache levels."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)
    builder.call(fn, [pointer, i32(0), i32(3), i32(1)])


@intrinsic
def prefetch_at(typingctx, address):
    """Asks the CPU to start loading the byte at ``address`` into cache (as
    :func:`~pyg_dist.sampler._sample_kernels.prefetch` does an array element)."""
    def codegen(context, builder, signature, args):
        emit_prefetch(builder, builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return context.get_dummy_value()
    return types.void(types.int64), codegen


@numba.njit(**_JIT)
def load(address, i, wide):
    """``load64`` where ``wide``, else ``load32``."""
    return load64(address, i) if wide else load32(address, i)
