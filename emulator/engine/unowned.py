"""Arrays that own nothing: compiled helpers take them without counting references.

Numba passes an array to a compiled function with an atomic increment of its owner's reference
count, and a decrement after; a kernel that calls small helpers a few times per descriptor with ten
arrays each spends most of its time there (the set-group kernel did, about 40%). A view made by
:func:`unowned` has no owner (``numba.carray`` over the array's address), so those calls count
nothing. The caller keeps the array itself alive while the view is in use (a kernel's argument is,
for the whole call) and makes a new view when it replaces the array.
"""

from __future__ import annotations

from numba import carray, types
from numba.extending import intrinsic

from tierlab.engine.jit import helper


@intrinsic
def data_pointer(typingctx, arr):
    """The data pointer of a C-contiguous ``int64`` array (any other array does not compile)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.layout == "C"):
        return None
    sig = types.CPointer(types.int64)(arr)

    def codegen(context, builder, sig, args):
        return context.make_array(sig.args[0])(context, builder, args[0]).data
    return sig, codegen


@helper
def unowned(a):
    """C-contiguous ``int64`` array ``a`` (any dimensions) as a view that owns nothing."""
    return carray(data_pointer(a), a.shape)
