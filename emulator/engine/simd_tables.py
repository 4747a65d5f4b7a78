"""The target's vector width and the forms :mod:`tierlab.engine.simd` builds only for targets
without AVX-512: a set's update read from rows of constant tables.

Without mask registers, a blend's lanes made from a bit mask in a general register cost a move into
a vector register, a broadcast and a compare an access (two of them on port 5 of an Intel core); a
row of a constant table costs one load. The tables are LLVM globals internal to each compiled
module (Numba's cache keeps them with the code, which it keys by the same CPU features).
"""

from __future__ import annotations

from llvmlite import ir

_I32 = ir.IntType(32)


def target_features() -> set:
    """The CPU features Numba compiles for: ``NUMBA_CPU_FEATURES`` where set (``NUMBA_CPU_NAME``
    alone keeps the host's), else the host's."""
    import llvmlite.binding as ll
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return {f[1:] for f in config.CPU_FEATURES.split(",") if f.startswith("+")}
    return {k for k, v in ll.get_host_cpu_features().items() if v}


def vector_bits(features) -> int:
    """The widest integer vector of a target, in bits: 512 with AVX-512 (``avx512bw``), 256 with
    AVX2, else 128."""
    return 512 if "avx512bw" in features else 256 if "avx2" in features else 128


VECTOR_BITS = vector_bits(target_features())


def permute_lru(n, elt) -> bool:
    """Whether an LRU set of ``n`` words of ``elt`` is updated by :func:`lru_by_permute`: a set of
    one 256-bit register on an AVX2 target without AVX-512 (8 32-bit words, 4 64-bit ones)."""
    return VECTOR_BITS == 256 and n * elt.width == 256 and elt.width in (32, 64)


def lanes_from_table(n, elt) -> bool:
    """Whether a set's blend lanes are a row of :func:`lane_table_row`: on a target without
    AVX-512 (no mask registers: the lanes as a bit mask in a general register would be moved into
    a vector one, broadcast and compared there, two of those on port 5 of an Intel core), for sets
    of up to 1024 bits."""
    return VECTOR_BITS < 512 and 2 <= n and n * elt.width <= 1024


def lane_table_row(builder, row, n, elt):
    """Row ``row`` of a constant table of ``n + 2`` rows of ``n`` words of ``elt``: row ``x < n``
    all ones in lanes ``0..x``, row ``n`` none, row ``n + 1`` all."""
    rows = [[-1 if x <= r < n or r > n else 0 for x in range(n)] for r in range(n + 2)]
    return _table_row(builder, f"tierlab_lanes_{n}x{elt.width}", ir.VectorType(elt, n), rows, row)


def lru_by_permute(builder, old, key_n, bits, n, elt):
    """An LRU set after a touch as one permute of its words by a row of a constant table, indexed
    by the match mask ``bits`` (row 0, a miss: every way one down; a hit at ``f``, the lowest set
    bit: way ``f`` to the front, the ways before it one down), then the key into way 0 (at a hit
    it is the word that was at ``f``). On AVX2, against the blend of the words pushed one down by
    lanes made from the mask (moved into a vector register, broadcast and compared there): eight
    instructions fewer an access, 27 -> 19 at one level. With AVX-512 the blend's lanes are a mask
    register and the blend stays."""
    per = elt.width // 32                          # 32-bit lanes a word: vpermd moves 32-bit lanes
    rows = []
    for mask in range(1 << n):
        f = (mask & -mask).bit_length() - 1 if mask else n - 1
        order = [f] + [x for x in range(n) if x != f]        # (a miss: the last way dropped)
        rows.append([per * w + k for w in order for k in range(per)])
    row_t = ir.VectorType(_I32, 8)
    index = _table_row(builder, f"tierlab_lru_permute_{n}x{elt.width}", row_t, rows, bits)
    permd = builder.module.declare_intrinsic("llvm.x86.avx2.permd", fnty=ir.FunctionType(row_t, [row_t, row_t]))
    moved = builder.bitcast(builder.call(permd, [builder.bitcast(old, row_t), index]), old.type)
    return builder.shuffle_vector(moved, key_n, ir.Constant(ir.VectorType(_I32, n), [n] + list(range(1, n))))


def _table_row(builder, name, row_t, rows, row):
    """Row ``row`` (an int64) of the constant table ``name`` of ``rows`` (vectors of ``row_t``),
    made once a module, internal to it, aligned to its rows (at most 64 bytes)."""
    align = min(64, row_t.count * row_t.element.width // 8)
    table = builder.module.globals.get(name)
    if table is None:
        arr_t = ir.ArrayType(row_t, len(rows))
        table = ir.GlobalVariable(builder.module, arr_t, name)
        table.global_constant, table.linkage, table.align = True, "internal", align
        table.initializer = ir.Constant(arr_t, [ir.Constant(row_t, r) for r in rows])
    return builder.load(builder.gep(table, [ir.Constant(_I32, 0), row]), align=align)
