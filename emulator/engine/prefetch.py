"""``prefetch(arr, i)``: a hint, from a compiled kernel, that ``arr[i]`` will be read soon."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I32 = ir.IntType(32)


@intrinsic
def prefetch(typingctx, arr, i):
    """``prefetch(arr, i)``: ask for the cache line of ``arr[i]`` to be read into the host's
    caches (LLVM's ``llvm.prefetch``: a hint, which never faults, so ``i`` may be past the end).
    For a kernel that reads its input once in order: the host's own prefetcher stops at each 4 KiB
    page, and a kernel a few nanoseconds an element waits at every page start. Non-temporal (read
    once: kept out of the caches the state and the caller's code live in where the host can)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        idx = context.cast(builder, args[1], sig.args[1], types.intp)
        ptr = builder.bitcast(builder.gep(ary.data, [idx]), ir.PointerType(ir.IntType(8)))
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(_I32, 0), ir.Constant(_I32, 0), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return types.void(arr, i), codegen
