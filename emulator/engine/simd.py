"""Whole-set operations as single vector instructions: the way search and the move-to-front.

A cache lookup compares a block against every way of its set, and an LRU update moves one way to
the front. Written as loops over the ways in Numba, LLVM neither vectorises them (the loop is
unrolled before the vectoriser sees it, and the early exit or select chain defeats it) nor avoids a
data-dependent branch per way; that loop was most of the replay's time. Here each operation is
emitted as LLVM vector IR over the ``W`` words of a set (``<W x i64>``): one load, one compare to a
``W``-bit mask, one count of trailing zeros; one shuffle and one masked blend for the move. LLVM
lowers them to what the host has (AVX-512, AVX2, NEON or scalar code); the results are the same on
every machine, only the speed differs.

The vector form needs the way count as a compile-time constant (a Numba literal, e.g. a closure
constant or a literal argument); given a run-time count, the same call switches to the vector form
for the common counts (a constant count folds the switch away) and emits a plain loop for others.
Both are intrinsics over a raw address (``arr.ctypes.data``; the caller keeps the array alive and the
index in bounds), so calling them adds no reference counting or call to the caller's loop.
Tested against plain Python in ``tests/engine/test_simd.py``.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from tierlab.engine.simd_tables import lane_table_row, lanes_from_table, lru_by_permute, permute_lru

_I1 = ir.IntType(1)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
MAX_VECTOR_WAYS = 64


def _vector_ways(ways) -> int:
    """The literal way count when the vector form applies, else 0 (a run-time loop)."""
    if isinstance(ways, types.IntegerLiteral) and 1 <= ways.literal_value <= MAX_VECTOR_WAYS:
        return ways.literal_value
    return 0


def _typed(*scalars) -> bool:
    """Every argument is an integer (the first the address of the words), widened to int64."""
    return all(isinstance(s, types.Integer) for s in scalars)


def _scalars(context, builder, sig, args):
    return [context.cast(builder, v, t, types.int64) for v, t in zip(args[1:], sig.args[1:])]


def _data(context, builder, sig, args, elt):
    """The words (of type ``elt``) at the address in the first argument."""
    addr = context.cast(builder, args[0], sig.args[0], types.uintp)
    return builder.inttoptr(addr, ir.PointerType(elt))


def _narrow(builder, value, elt):
    """An int64 scalar as a word of type ``elt`` (the caller keeps it in range)."""
    return value if elt.width == 64 else builder.trunc(value, elt)


def _splat(builder, value, n):
    vt = ir.VectorType(value.type, n)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(_I32, n), [0] * n))


def _vector_ptr(builder, data, base, n):
    return builder.bitcast(builder.gep(data, [base]), ir.PointerType(ir.VectorType(data.type.pointee, n)))


def _load_opaque(builder, data, base, elt, n):
    """The ``n`` words at ``data[base]``, loaded through a copy of ``data`` the optimiser cannot see
    through (an empty asm on the loop-invariant address; hoisted out of loops, and the index stays
    in the load's addressing, so no instruction is added an access): a blend of loaded words stored
    back to where they came from would otherwise become a masked store where a set spans several
    host vectors (AVX2: a 16-way int32 or an 8-way int64 set), slow on AMD CPUs before Zen 4; so a
    plain store on every host."""
    return builder.load(_vector_ptr(builder, _opaque_ptr(builder, data), base, n), align=elt.width // 8)


def _opaque_ptr(builder, ptr):
    """``ptr`` through :func:`_opaque`: the same address, which the optimiser cannot tell is ``ptr``."""
    return builder.inttoptr(_opaque(builder, builder.ptrtoint(ptr, _I64)), ptr.type)


def _opaque(builder, value):
    """``value`` (a general-register integer) through an empty asm: the same value, which the
    optimiser cannot see through (a constant one is hoisted out of loops)."""
    return builder.call(ir.InlineAsm(ir.FunctionType(value.type, [value.type]), "", "=r,0", False),
                        [value], "opaque", attrs=("nounwind", "readnone"))


VECTOR_WAYS = (2, 4, 8, 16, 32)   # run-time way counts switched to the vector form


def _by_ways(builder, ways_v, n_literal, vector, loop):
    """Emit ``vector(n)`` for a literal way count, else a switch on the run-time count: the vector
    form for each of :data:`VECTOR_WAYS`, ``loop()`` for any other. Returns the merged value (or
    None when the forms return None). A constant count folds the switch away."""
    if n_literal:
        return vector(n_literal)
    end = builder.append_basic_block("ways.end")
    other = builder.append_basic_block("ways.loop")
    switch = builder.switch(ways_v, other)
    results = []
    for w in VECTOR_WAYS:
        bb = builder.append_basic_block(f"ways.{w}")
        switch.add_case(ir.Constant(_I64, w), bb)
        builder.position_at_end(bb)
        results.append((vector(w), builder.block))
        builder.branch(end)
    builder.position_at_end(other)
    results.append((loop(), builder.block))
    builder.branch(end)
    builder.position_at_end(end)
    if results[0][0] is None:
        return None
    phi = builder.phi(_I64)
    for v, bb in results:
        phi.add_incoming(v, bb)
    return phi


def _lookup_loop(builder, data, base_v, ways_v, key_v, low_v):
    """The first way whose word ``| low_v`` is ``key_v``, else ``ways_v``, by a run-time loop."""
    found = cgutils.alloca_once(builder, _I64)
    builder.store(ways_v, found)
    with cgutils.for_range(builder, ways_v) as it:
        x = it.index
        word = builder.load(builder.gep(data, [builder.add(base_v, x)]))
        eq = builder.icmp_signed("==", builder.or_(word, low_v), key_v)
        cur = builder.load(found)
        first = builder.and_(eq, builder.icmp_signed("==", cur, ways_v))
        builder.store(builder.select(first, x, cur), found)
    return builder.load(found)


def _lookup_ir(context, builder, sig, args, n, elt):
    """IR for :func:`set_lookup` (``n``: the literal way count, 0 for a run-time count)."""
    data = _data(context, builder, sig, args, elt)
    base_v, ways_v, key_v, low_v = _scalars(context, builder, sig, args)
    key_v, low_v = _narrow(builder, key_v, elt), _narrow(builder, low_v, elt)
    align = elt.width // 8

    def vector(n):
        words_n = builder.or_(builder.load(_vector_ptr(builder, data, base_v, n), align=align), _splat(builder, low_v, n))
        bits = builder.bitcast(builder.icmp_signed("==", words_n, _splat(builder, key_v, n)), ir.IntType(n))
        wide = ir.IntType(max(64, n + 1))     # room for the stop bit at ``n``
        stop = builder.or_(builder.zext(bits, wide), ir.Constant(wide, 1 << n))
        first = builder.cttz(stop, ir.Constant(_I1, 0))
        return builder.trunc(first, _I64) if wide.width > 64 else first

    def loop():
        return _lookup_loop(builder, data, base_v, ways_v, key_v, low_v)

    return _by_ways(builder, ways_v, n, vector, loop)


def _intrinsics(elt: ir.IntType):
    """``set_lookup`` and ``set_put`` over words of type ``elt`` (int64 or int32)."""

    @intrinsic
    def set_lookup(typingctx, words, base, ways, key, low):
        if not _typed(words, base, ways, key, low):
            return None
        n = _vector_ways(ways)

        def codegen(context, builder, sig, args):
            return _lookup_ir(context, builder, sig, args, n, elt)

        return types.int64(words, base, ways, key, low), codegen

    @intrinsic
    def set_put(typingctx, words, base, ways, way, word, move):
        if not _typed(words, base, ways, way, word) or not isinstance(move, types.Boolean):
            return None
        n = _vector_ways(ways)

        def codegen(context, builder, sig, args):
            data = _data(context, builder, sig, args, elt)
            base_v, ways_v, way_v, word_v = _scalars(context, builder, sig, args[:-1])
            word_v = _narrow(builder, word_v, elt)
            move_v = args[-1]

            def vector(n):
                # the word goes to lane ``lo`` (0 with ``move``, else ``way``); lanes lo+1..way take
                # the lane before them. Lane masks only: a select on the scalar ``move`` would
                # become a branch
                ptr = _vector_ptr(builder, data, base_v, n)
                # the lanes kept are loaded through _load_opaque: a plain store on every host
                old = _load_opaque(builder, data, base_v, elt, n)
                shifted = builder.shuffle_vector(old, old, ir.Constant(ir.VectorType(_I32, n), [0] + list(range(n - 1))))
                lane = ir.Constant(ir.VectorType(elt, n), [ir.Constant(elt, x) for x in range(n)])
                keep_way = builder.sub(ir.Constant(_I64, 0), builder.zext(builder.not_(move_v), _I64))
                lo = _splat(builder, _narrow(builder, builder.and_(way_v, keep_way), elt), n)
                way_n = _splat(builder, _narrow(builder, way_v, elt), n)
                in_range = builder.and_(builder.icmp_signed(">", lane, lo), builder.icmp_signed("<=", lane, way_n))
                new = builder.select(in_range, shifted, old)
                new = builder.select(builder.icmp_signed("==", lane, lo), _splat(builder, word_v, n), new)
                builder.store(new, ptr, align=elt.width // 8)

            def loop():
                with builder.if_else(move_v) as (then, otherwise):
                    with then:
                        _shift_loop(builder, data, base_v, way_v, word_v)
                    with otherwise:
                        builder.store(word_v, builder.gep(data, [builder.add(base_v, way_v)]))

            _by_ways(builder, ways_v, n, vector, loop)
            return context.get_dummy_value()

        return types.void(words, base, ways, way, word, move), codegen

    @intrinsic
    def set_push(typingctx, words, base, ways, word, push):
        if not _typed(words, base, ways, word) or not isinstance(push, types.Boolean):
            return None
        n = _vector_ways(ways)

        def codegen(context, builder, sig, args):
            data = _data(context, builder, sig, args, elt)
            base_v, ways_v, word_v = _scalars(context, builder, sig, args[:-1])
            word_v = _narrow(builder, word_v, elt)
            push_v = args[-1]

            def vector(n):
                # one two-source shuffle puts the word in lane 0 and every way one down; one blend
                # on the (data) flag keeps or takes it. The words are loaded through an opaque copy
                # of the address (_load_opaque)
                ptr = _vector_ptr(builder, data, base_v, n)
                old = _load_opaque(builder, data, base_v, elt, n)
                pushed = builder.shuffle_vector(old, _splat(builder, word_v, n),
                                                ir.Constant(ir.VectorType(_I32, n), [n] + list(range(n - 1))))
                flag = builder.icmp_signed("!=", _splat(builder, builder.zext(push_v, elt), n),
                                           ir.Constant(ir.VectorType(elt, n), [ir.Constant(elt, 0)] * n))
                builder.store(builder.select(flag, pushed, old), ptr, align=elt.width // 8)

            def loop():
                with builder.if_then(push_v):
                    _shift_loop(builder, data, base_v, builder.sub(ways_v, ir.Constant(_I64, 1)), word_v)

            _by_ways(builder, ways_v, n, vector, loop)
            return context.get_dummy_value()

        return types.void(words, base, ways, word, push), codegen

    @intrinsic
    def set_front(typingctx, words, base, ways, way, word):
        if not _typed(words, base, ways, way, word):
            return None
        n = _vector_ways(ways)

        def codegen(context, builder, sig, args):
            data = _data(context, builder, sig, args, elt)
            base_v, ways_v, way_v, word_v = _scalars(context, builder, sig, args)
            word_v = _narrow(builder, word_v, elt)

            def vector(n):
                # lanes 0..way take the words pushed one down with the word in lane 0 (one
                # two-source shuffle), the others keep theirs: one compare and one blend
                ptr = _vector_ptr(builder, data, base_v, n)
                old = _load_opaque(builder, data, base_v, elt, n)
                pushed = builder.shuffle_vector(old, _splat(builder, word_v, n),
                                                ir.Constant(ir.VectorType(_I32, n), [n] + list(range(n - 1))))
                lane = ir.Constant(ir.VectorType(elt, n), [ir.Constant(elt, x) for x in range(n)])
                take = builder.icmp_signed("<=", lane, _splat(builder, _narrow(builder, way_v, elt), n))
                builder.store(builder.select(take, pushed, old), ptr, align=elt.width // 8)

            def loop():
                with builder.if_then(builder.icmp_signed(">=", way_v, ir.Constant(_I64, 0))):
                    _shift_loop(builder, data, base_v, way_v, word_v)

            _by_ways(builder, ways_v, n, vector, loop)
            return context.get_dummy_value()

        return types.void(words, base, ways, way, word), codegen

    @intrinsic
    def set_touch(typingctx, words, base, ways, key, act, fifo):
        if not _typed(words, base, ways, key, act) or not isinstance(fifo, types.Boolean):
            return None
        n = _vector_ways(ways)
        fifo_v = fifo.literal_value if isinstance(fifo, types.BooleanLiteral) else None

        def codegen(context, builder, sig, args):
            return _touch_ir(context, builder, sig, args, n, elt, fifo_v)

        return types.int64(words, base, ways, key, act, fifo), codegen

    def touch_of_word(name, ir_of, widths):
        """A ``set_touch`` whose key is made from ``blk[j]`` (a 1-d array of words of one of
        ``widths`` bits) and a further integer argument, by ``ir_of``."""
        def op(typingctx, words, base, ways, blk, j, arg, act, fifo):
            if not _typed(words, base, ways, j, arg, act) or not isinstance(fifo, types.Boolean) \
                    or not isinstance(blk, types.Array) or blk.ndim != 1 or not isinstance(blk.dtype, types.Integer) \
                    or blk.dtype.bitwidth not in widths:
                return None
            n = _vector_ways(ways)
            fifo_v = fifo.literal_value if isinstance(fifo, types.BooleanLiteral) else None

            def codegen(context, builder, sig, args):
                return ir_of(context, builder, sig, args, n, elt, fifo_v)

            return types.int64(words, base, ways, blk, j, arg, act, fifo), codegen

        op.__name__ = op.__qualname__ = name
        return intrinsic(op)

    set_touch_at = touch_of_word("set_touch_at", _touch_at_ir, (32, 64))
    set_touch_key = touch_of_word("set_touch_key", _touch_key_ir, (elt.width,))

    return set_lookup, set_put, set_push, set_front, set_touch, set_touch_at, set_touch_key


def _touch_key_ir(context, builder, sig, args, n, elt, fifo):
    """IR for :func:`set_touch_key`: the key is ``blk[j] & key_mask``, its vector a broadcast of
    ``blk[j]`` loaded from memory through an address the optimiser cannot see through (an empty
    asm), so not merged with the scalar load of the same word: no move from a general register."""
    base_v, ways_v = _scalars(context, builder, sig, args[:3])
    blk_t, j_v = sig.args[3], context.cast(builder, args[4], sig.args[4], types.intp)
    mask = _narrow(builder, context.cast(builder, args[5], sig.args[5], types.int64), elt)
    act_v = context.cast(builder, args[6], sig.args[6], types.int64)
    ary = context.make_array(blk_t)(context, builder, args[3])
    ptr = cgutils.get_item_pointer(context, builder, blk_t, ary, [j_v], wraparound=False)
    key_w = builder.and_(builder.load(ptr), mask)

    def key_splat(n):
        # the word loaded at its offset from an opaque copy of the array's address (loop-invariant:
        # hoisted; the offset stays in the load's addressing), so the load is not merged with the
        # scalar one; the mask's lanes ORed with lane numbers ANDed with an opaque zero, so the
        # optimiser cannot see the mask as one word and mask before broadcasting
        nothing = _opaque(builder, ir.Constant(elt, 0))
        lane = ir.Constant(ir.VectorType(elt, n), [ir.Constant(elt, x) for x in range(n)])
        m = builder.or_(_splat(builder, mask, n), builder.and_(lane, _splat(builder, nothing, n)))
        offset = builder.sub(builder.ptrtoint(ptr, _I64), builder.ptrtoint(ary.data, _I64))
        far_data = builder.ptrtoint(_opaque_ptr(builder, ary.data), _I64)
        far = builder.load(builder.inttoptr(builder.add(far_data, offset), ptr.type), align=elt.width // 8)
        return builder.and_(_splat(builder, far, n), m)

    return _touch_body(builder, _data(context, builder, sig, args, elt), base_v, ways_v, key_w, key_splat, act_v,
                       args[-1], n, elt, fifo)


def _touch_ir(context, builder, sig, args, n, elt, fifo):
    """IR for :func:`set_touch` (``n``: the literal way count, 0 for a run-time count)."""
    base_v, ways_v, key_v, act_v = _scalars(context, builder, sig, args[:-1])
    key_w = _narrow(builder, key_v, elt)
    return _touch_body(builder, _data(context, builder, sig, args, elt), base_v, ways_v, key_w,
                       lambda n: _splat(builder, key_w, n), act_v, args[-1], n, elt, fifo)


def _touch_at_ir(context, builder, sig, args, n, elt, fifo):
    """IR for :func:`set_touch_at`: the key is ``blk[j] >> key_sh``, made in the vector registers
    from a load of ``blk[j]`` there, so no general register is moved into a vector one for it. The
    scalar code loads the same word for the set's index; a one-lane load of it would be merged
    with that one, a two-lane load of ``blk[j - 1:j + 1]`` is not (and the compiler narrows it to
    a broadcast of ``blk[j]`` from memory)."""
    base_v, ways_v = _scalars(context, builder, sig, args[:3])
    blk_t, j_v = sig.args[3], context.cast(builder, args[4], sig.args[4], types.intp)
    key_sh = context.cast(builder, args[5], sig.args[5], types.int64)
    act_v = context.cast(builder, args[6], sig.args[6], types.int64)
    ary = context.make_array(blk_t)(context, builder, args[3])
    ptr = cgutils.get_item_pointer(context, builder, blk_t, ary, [j_v], wraparound=False)
    word_t = ptr.type.pointee
    # the word and the one before it (j >= 1: both inside the array) loaded as a two-lane vector:
    # a load of its own, which the compiler does not merge with the scalar one
    pair = builder.load(builder.bitcast(builder.gep(ptr, [ir.Constant(_I64, -1)]),
                                        ir.PointerType(ir.VectorType(word_t, 2))), align=word_t.width // 8)
    w = builder.extract_element(pair, ir.Constant(_I32, 1))
    w64 = w if word_t.width == 64 else builder.zext(w, _I64)
    key_w = _narrow(builder, builder.lshr(w64, key_sh), elt)

    def key_splat(n):
        v = builder.shuffle_vector(pair, ir.Constant(pair.type, ir.Undefined), ir.Constant(ir.VectorType(_I32, 2), [1, 1]))
        if word_t.width < 64:
            v = builder.zext(v, ir.VectorType(_I64, 2))
        v = builder.bitcast(builder.lshr(v, _splat(builder, key_sh, 2)), ir.VectorType(elt, 128 // elt.width))
        return builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(ir.VectorType(_I32, n), [0] * n))

    return _touch_body(builder, _data(context, builder, sig, args, elt), base_v, ways_v, key_w, key_splat, act_v,
                       args[-1], n, elt, fifo)


def _touch_body(builder, data, base_v, ways_v, key_w, key_splat, act_v, fifo_v, n, elt, fifo):
    """The lookup and update of :func:`set_touch` on the set at ``data[base_v]``: ``key_w`` the
    key (a word of type ``elt``), ``key_splat(n)`` the same in ``n`` lanes."""
    # a literal ``fifo`` builds one form; a run-time one both, chosen by a select
    is_fifo = fifo_v if fifo is None else ir.Constant(_I1, int(fifo))
    zero, one = ir.Constant(_I64, 0), ir.Constant(_I64, 1)
    act_all = builder.sub(zero, builder.and_(act_v, one))      # all ones where the set is changed

    def vector(n):
        # one load; the lanes that match as an n-bit mask (no count of trailing zeros: the lanes
        # 0..first match take the words pushed one down with the key in lane 0, and that lane set
        # is the mask's lowest set bit and the bits below it, ``t ^ (t - 1)``)
        ptr = _vector_ptr(builder, data, base_v, n)
        old = _load_opaque(builder, data, base_v, elt, n)
        key_n = key_splat(n)
        eq = builder.icmp_signed("==", old, key_n)
        bits = builder.bitcast(eq, ir.IntType(n))
        bits = builder.zext(bits, _I64) if n < 64 else bits
        miss = builder.zext(builder.icmp_signed("==", bits, zero), _I64)
        # FIFO: a hit leaves the set as it is, a miss pushes the key in front; LRU: the lanes up
        # to the first match, all of them on a miss
        t = builder.or_(bits, ir.Constant(_I64, (1 << (n - 1)) - (1 << 64 if n == 64 else 0)))
        acts = builder.icmp_signed("!=", act_all, zero)
        if lanes_from_table(n, elt):
            # the lanes as a row of a constant table (row x < n: lanes 0..x; row n: none; row n + 1:
            # all): LRU's row is the first match (the last way on a miss), FIFO's n + miss
            lru_row = builder.cttz(t, ir.Constant(_I1, 1))
            row = builder.select(is_fifo, builder.add(ir.Constant(_I64, n), miss), lru_row)
            row = builder.select(acts, row, ir.Constant(_I64, n))
            lanes = builder.icmp_signed("<", lane_table_row(builder, row, n, elt),
                                        ir.Constant(ir.VectorType(elt, n), None))
        else:
            take = builder.select(is_fifo, builder.sub(zero, miss), builder.xor(t, builder.sub(t, one)))
            take = builder.and_(take, act_all)
            lanes = builder.bitcast(builder.trunc(take, ir.IntType(n)), ir.VectorType(_I1, n))
        pushed = builder.shuffle_vector(old, key_n, ir.Constant(ir.VectorType(_I32, n), [n] + list(range(n - 1))))
        new = builder.select(lanes, pushed, old)
        if fifo is not True and permute_lru(n, elt):
            # LRU by one permute (a FIFO, or a run-time flag that is not a constant, keeps the blend)
            lru = builder.select(acts, lru_by_permute(builder, old, key_n, bits, n, elt), old)
            new = builder.select(is_fifo, new, lru)
        builder.store(new, ptr, align=elt.width // 8)
        return miss

    def loop():
        r = _lookup_loop(builder, data, base_v, ways_v, key_w, ir.Constant(elt, 0))
        miss = builder.zext(builder.icmp_signed("==", r, ways_v), _I64)
        # FIFO: on a miss, every way one down; LRU: the ways up to the hit's (the last on a miss)
        way = builder.select(is_fifo, builder.select(builder.trunc(miss, _I1), builder.sub(ways_v, one),
                                                     ir.Constant(_I64, -1)), builder.sub(r, miss))
        with builder.if_then(builder.and_(builder.icmp_signed("!=", act_all, zero),
                                          builder.icmp_signed(">=", way, zero))):
            _shift_loop(builder, data, base_v, way, key_w)
        return miss

    return _by_ways(builder, ways_v, n, vector, loop)


set_lookup, set_put, set_push, set_front, set_touch, set_touch_at, set_touch_key = _intrinsics(_I64)
set_lookup32, set_put32, set_push32, set_front32, set_touch32, set_touch_at32, set_touch_key32 = _intrinsics(_I32)
set_lookup16, set_put16, set_push16, set_front16, set_touch16, set_touch_at16, set_touch_key16 = _intrinsics(ir.IntType(16))
set_touch.__doc__ = set_touch32.__doc__ = set_touch16.__doc__ = """``set_touch(words, base, ways, key, act, fifo)``:
look ``key`` up in the set at ``words[base]`` and return 1 on a miss, else 0; with ``act`` 1,
update the set as a clean cache tier does (``fifo``, a literal: a miss pushes the key in front, a
hit changes nothing; else LRU: the key to way 0 and the ways before its own, or every way on a
miss, one down); with ``act`` 0, leave it as it is. The lookup and the update in one load, one
compare, one shuffle and one blend, no branch and no count of trailing zeros."""
set_touch_at.__doc__ = set_touch_at32.__doc__ = set_touch_at16.__doc__ = """``set_touch_at(words, base, ways, blk, j,
key_sh, act, fifo)``: ``set_touch(words, base, ways, blk[j] >> key_sh, act, fifo)`` (``blk`` a 1-d
array of 32- or 64-bit words, ``1 <= j < len(blk)``), the key made in the vector registers from a load of
``blk[j]`` there: no general register moved to a vector one (one such move an access was 5-11% of
a one-level replay on an AMD EPYC Zen 5)."""
set_touch_key.__doc__ = set_touch_key32.__doc__ = set_touch_key16.__doc__ = """``set_touch_key(words, base, ways,
blk, j, key_mask, act, fifo)``: ``set_touch(words, base, ways, blk[j] & key_mask, act, fifo)``
(``blk`` a 1-d array of words as wide as the set's, ``0 <= j < len(blk)``: a keyed tier), the key's
lanes one broadcast of ``blk[j]`` from memory, masked there: no general register moved into a vector
one (on an Intel core, a broadcast from a general register takes port 5, beside the compare, the
mask move and the shuffle)."""
set_front.__doc__ = set_front32.__doc__ = set_front16.__doc__ = """``set_front(words, base, ways, way, word)``: ``set_put(words,
base, ways, way, word, True)`` (the word to way 0, ways ``0..way-1`` one down) as one two-source
shuffle, one compare and one blend. ``way = -1`` leaves the set as it is (in the vector form
without a branch: no lane is at or below it)."""
set_push.__doc__ = set_push32.__doc__ = set_push16.__doc__ = """``set_push(words, base, ways, word, push)``: with ``push``, write
``word`` to way 0 of the set at ``words[base]`` and every way one down (the last dropped: a FIFO
fill, or an LRU miss); without, leave the set as it is. The same as ``set_put(..., ways - 1, word,
True)`` or nothing, in one shuffle and one blend, no branch."""
set_lookup.__doc__ = set_lookup32.__doc__ = set_lookup16.__doc__ = """``set_lookup(words, base, ways, key, low)``: the first way
``x`` < ``ways`` with ``words[base + x] | low == key``, else ``ways`` (``words``: the address of the
int64 words, or int32 or int16 words for the ``32`` and ``16`` forms, whose key must fit in them).

Without a branch: the caller takes ``miss = r == ways`` and works on way ``r - miss`` (the last way
on a miss), so a random mix of hits and misses costs no mispredictions."""
set_put.__doc__ = set_put32.__doc__ = set_put16.__doc__ = """``set_put(words, base, ways, way, word, move)``: write ``word`` to
the set at ``words[base]``: with ``move``, at way 0, ways ``0..way-1`` one down (an LRU hit or a
fill: what was in ``way`` is dropped); without, in place at ``way``. One blend either way, no
branch."""


def _shift_loop(builder, data, base_v, way_v, word_v):
    with cgutils.for_range(builder, way_v) as it:
        x = builder.sub(way_v, it.index)                # way, way - 1, ..., 1
        dst = builder.gep(data, [builder.add(base_v, x)])
        src = builder.gep(data, [builder.sub(builder.add(base_v, x), ir.Constant(_I64, 1))])
        builder.store(builder.load(src), dst)
    builder.store(word_v, builder.gep(data, [base_v]))
