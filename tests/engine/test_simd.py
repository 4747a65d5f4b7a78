"""The vector set operations (emulator/engine/simd.py) against plain Python on the same words.

Each operation is compiled three ways — with the way count as a literal (the vector form for
1..64 ways), with a run-time count (switched to the vector form for 2, 4, 8, 16, 32 ways, a loop
otherwise) — and every way count from 1 to 66 is tried, with keys present once, absent, equal to
the empty word, and words whose low bit is set (the dirty bit the stream kernel keeps in a word).
"""

import numpy as np
import pytest

from tierlab.engine.jit import njit
from tierlab.engine.prefetch import prefetch
from tierlab.engine.simd import set_front, set_front32, set_lookup, set_push, set_push32, set_put

WAYS = list(range(1, 67))


@njit
def _lookup(arr, base, ways, key, low):
    return set_lookup(arr.ctypes.data, base, ways, key, low)


@njit
def _put(arr, base, ways, way, word, move):
    set_put(arr.ctypes.data, base, ways, way, word, move)


def _literal(ways):
    """The same operations compiled with ``ways`` as a constant (the form the stream kernel uses)."""
    @njit(cache=False)
    def lookup(arr, base, key, low):
        return set_lookup(arr.ctypes.data, base, ways, key, low)

    @njit(cache=False)
    def put(arr, base, way, word, move):
        set_put(arr.ctypes.data, base, ways, way, word, move)

    return lookup, put


def _ref_lookup(words, key, low):
    for x, w in enumerate(words):
        if (int(w) | low) == key:
            return x
    return len(words)


def _ref_put(arr, base, ways, way, word, move):
    want = arr.copy()
    row = list(want[base:base + ways])
    if move:
        row.pop(way)
        row = [word] + row
    else:
        row[way] = word
    want[base:base + ways] = row
    return want


@pytest.mark.parametrize("ways", WAYS)
def test_lookup_matches_a_loop(ways):
    rng = np.random.default_rng(ways)
    lit_lookup, _ = _literal(ways) if ways in (1, 3, 8, 16, 24, 64) else (None, None)
    for trial in range(40):
        base = int(rng.integers(0, 5))
        arr = rng.integers(-1, 3 * ways, size=base + ways + 3).astype(np.int64)
        arr[rng.random(arr.size) < 0.2] = -1
        low = int(rng.integers(0, 2))
        words = arr[base:base + ways]
        if trial % 3 == 0:
            key = int(words[rng.integers(0, ways)]) | low
        else:
            key = int(rng.integers(-1, 3 * ways)) | low
        want = _ref_lookup(words, key, low)
        assert _lookup(arr, base, ways, key, low) == want
        if lit_lookup is not None:
            assert lit_lookup(arr, base, key, low) == want
        # the words outside the set are never read as part of it
        outside = arr.copy()
        outside[:base] = key
        outside[base + ways:] = key
        assert _lookup(outside, base, ways, key, low) == want


@pytest.mark.parametrize("ways", WAYS)
def test_put_matches_a_list_move_or_store(ways):
    rng = np.random.default_rng(1000 + ways)
    _, lit_put = _literal(ways) if ways in (1, 3, 8, 16, 24, 64) else (None, None)
    for trial in range(40):
        base = int(rng.integers(0, 5))
        arr = rng.integers(-1, 1 << 40, size=base + ways + 3).astype(np.int64)
        way = int(rng.integers(0, ways))
        word = int(rng.integers(-1, 1 << 62))
        move = trial % 2 == 0
        want = _ref_put(arr, base, ways, way, word, move)
        got = arr.copy()
        _put(got, base, ways, way, word, move)
        assert np.array_equal(got, want)
        if lit_put is not None:
            got = arr.copy()
            lit_put(got, base, way, word, move)
            assert np.array_equal(got, want)


@njit
def _push(arr, base, ways, word, push):
    set_push(arr.ctypes.data, base, ways, word, push)


@njit
def _push32(arr, base, ways, word, push):
    set_push32(arr.ctypes.data, base, ways, word, push)


def _literal_push(ways):
    @njit(cache=False)
    def push(arr, base, word, flag):
        set_push(arr.ctypes.data, base, ways, word, flag)

    @njit(cache=False)
    def push32(arr, base, word, flag):
        set_push32(arr.ctypes.data, base, ways, word, flag)

    return push, push32


@pytest.mark.parametrize("ways", WAYS)
def test_push_is_a_move_of_the_last_way_to_the_front_or_nothing(ways):
    """set_push(word, True) is set_put(ways - 1, word, move=True); set_push(word, False) changes
    nothing; on int64 and int32 words, with run-time and (for some) literal way counts."""
    rng = np.random.default_rng(2000 + ways)
    lit = _literal_push(ways) if ways in (1, 3, 8, 16, 24, 64) else None
    for trial in range(20):
        base = int(rng.integers(0, 5))
        arr = rng.integers(-1, 1 << 30, size=base + ways + 3).astype(np.int64)
        word = int(rng.integers(-1, 1 << 30))
        push = trial % 2 == 0
        want = _ref_put(arr, base, ways, ways - 1, word, True) if push else arr.copy()
        for wide in (True, False):
            a = arr if wide else arr.astype(np.int32)
            w = want if wide else want.astype(np.int32)
            fns = [lambda g: (_push if wide else _push32)(g, base, ways, word, push)]
            if lit is not None:
                fns.append(lambda g: lit[0 if wide else 1](g, base, word, push))
            for fn in fns:
                got = a.copy()
                fn(got)
                assert np.array_equal(got, w), (ways, wide, push)


@njit
def _front(arr, base, ways, way, word):
    set_front(arr.ctypes.data, base, ways, way, word)


@njit
def _front32(arr, base, ways, way, word):
    set_front32(arr.ctypes.data, base, ways, way, word)


def _literal_front(ways):
    @njit(cache=False)
    def front(arr, base, way, word):
        set_front(arr.ctypes.data, base, ways, way, word)

    @njit(cache=False)
    def front32(arr, base, way, word):
        set_front32(arr.ctypes.data, base, ways, way, word)

    return front, front32


@pytest.mark.parametrize("ways", WAYS)
def test_front_is_put_with_a_move(ways):
    """set_front(way, word) is set_put(way, word, move=True), on int64 and int32 words, with
    run-time and (for some) literal way counts."""
    rng = np.random.default_rng(3000 + ways)
    lit = _literal_front(ways) if ways in (1, 3, 8, 16, 24, 64) else None
    for _ in range(20):
        base = int(rng.integers(0, 5))
        arr = rng.integers(-1, 1 << 30, size=base + ways + 3).astype(np.int64)
        way = int(rng.integers(0, ways))
        word = int(rng.integers(-1, 1 << 30))
        want = _ref_put(arr, base, ways, way, word, True)
        for wide in (True, False):
            a = arr if wide else arr.astype(np.int32)
            w = want if wide else want.astype(np.int32)
            fns = [lambda g: (_front if wide else _front32)(g, base, ways, way, word)]
            if lit is not None:
                fns.append(lambda g: lit[0 if wide else 1](g, base, way, word))
            for fn in fns:
                got = a.copy()
                fn(got)
                assert np.array_equal(got, w), (ways, wide, way)


def _narrow_forms(ways, literal):
    """lookup / push / front over int16 and int32 words (the chain's tag words), the way count a
    run-time value or (``literal``) a constant."""
    from tierlab.engine.simd import set_front16, set_lookup16, set_lookup32, set_push16

    ops = {16: (set_lookup16, set_push16, set_front16), 32: (set_lookup32, set_push32, set_front32)}
    out = {}
    for width, (lk, pu, fr) in ops.items():
        if literal:
            @njit(cache=False)
            def lookup(arr, base, n, key, lk=lk):
                return lk(arr.ctypes.data, base, ways, key, 0)

            @njit(cache=False)
            def push(arr, base, n, word, flag, pu=pu):
                pu(arr.ctypes.data, base, ways, word, flag)

            @njit(cache=False)
            def front(arr, base, n, way, word, fr=fr):
                fr(arr.ctypes.data, base, ways, way, word)
        else:
            @njit(cache=False)
            def lookup(arr, base, n, key, lk=lk):
                return lk(arr.ctypes.data, base, n, key, 0)

            @njit(cache=False)
            def push(arr, base, n, word, flag, pu=pu):
                pu(arr.ctypes.data, base, n, word, flag)

            @njit(cache=False)
            def front(arr, base, n, way, word, fr=fr):
                fr(arr.ctypes.data, base, n, way, word)
        out[width] = (lookup, push, front)
    return out


@pytest.mark.parametrize("ways", [1, 2, 3, 4, 7, 8, 12, 16, 17, 32])
@pytest.mark.parametrize("literal", [False, True])
def test_narrow_words_match_the_reference(ways, literal):
    """The int16 and int32 forms of lookup, push and front (the chain's tag words) against plain
    Python, keys and words spanning each type's range; front with way -1 changes nothing (the
    chain's tier that must not change), on every form."""
    rng = np.random.default_rng(4000 + ways)
    forms = _narrow_forms(ways, literal)
    for width, (lookup, push, front) in forms.items():
        dt = np.int16 if width == 16 else np.int32
        top = np.iinfo(dt).max
        for trial in range(30):
            base = int(rng.integers(0, 4))
            arr = rng.integers(-1, top, size=base + ways + 3).astype(dt)
            arr[rng.random(arr.size) < 0.2] = -1
            words = arr[base:base + ways]
            key = int(words[rng.integers(0, ways)]) if trial % 3 == 0 else int(rng.integers(0, top))
            assert lookup(arr, base, ways, key) == _ref_lookup(words, key, 0), (width, key)
            word = int(rng.integers(0, top))
            flag = trial % 2 == 0
            got = arr.copy()
            push(got, base, ways, word, flag)
            want = _ref_put(arr, base, ways, ways - 1, word, True) if flag else arr
            assert np.array_equal(got, want.astype(dt)), (width, flag)
            way = int(rng.integers(-1, ways))
            got = arr.copy()
            front(got, base, ways, way, word)
            want = arr if way < 0 else _ref_put(arr, base, ways, way, word, True)
            assert np.array_equal(got, want.astype(dt)), (width, way)
    got = np.arange(ways + 2, dtype=np.int64)
    _front(got, 1, ways, -1, 99)
    assert np.array_equal(got, np.arange(ways + 2)), "int64 front with way -1"


def _touch_forms(ways, literal, fifo):
    """set_touch over int16, int32 and int64 words, the way count a constant or a run-time value,
    ``fifo`` a literal (as the chain builds it)."""
    from tierlab.engine.simd import set_touch, set_touch16, set_touch32

    out = {}
    for width, op in ((16, set_touch16), (32, set_touch32), (64, set_touch)):
        if literal:
            @njit(cache=False)
            def touch(arr, base, n, key, act, op=op):
                return op(arr.ctypes.data, base, ways, key, act, fifo)
        else:
            @njit(cache=False)
            def touch(arr, base, n, key, act, op=op):
                return op(arr.ctypes.data, base, n, key, act, fifo)
        out[width] = touch
    return out


def _ref_touch(row, key, act, fifo):
    """(miss, the set after): a clean LRU or FIFO set, most recent (or newest) first."""
    row = list(row)
    miss = key not in row
    if act:
        if miss:
            row = [key] + row[:-1]
        elif not fifo:
            row.remove(key)
            row = [key] + row
    return int(miss), row


@pytest.mark.parametrize("ways", [1, 2, 3, 4, 7, 8, 12, 16, 17, 32, 64])
@pytest.mark.parametrize("literal", [False, True])
@pytest.mark.parametrize("fifo", [False, True])
def test_touch_matches_the_reference(ways, literal, fifo):
    """set_touch (lookup and update in one: the chain's tier) against a plain-Python LRU / FIFO
    set, on every word width, hits at every way, misses into full and part-empty sets (-1: the
    empty word), and ``act`` 0 (the tier above hit) leaving the set as it was."""
    rng = np.random.default_rng(5000 + ways + 100 * fifo)
    forms = _touch_forms(ways, literal, fifo)
    for width, touch in forms.items():
        dtype = {16: np.int16, 32: np.int32, 64: np.int64}[width]
        top = np.iinfo(dtype).max
        for trial in range(40):
            base = ways * int(rng.integers(0, 3))
            a = np.full(3 * ways + 8, -1, dtype)
            filled = ways if trial % 4 else int(rng.integers(0, ways + 1))
            keys = rng.choice(np.arange(top - 4 * ways, top, dtype=np.int64), size=ways + 1, replace=False)
            a[base:base + filled] = keys[:filled]
            key = int(keys[int(rng.integers(0, ways + 1))]) if trial % 3 else int(keys[-1])
            act = int(trial % 5 != 0)
            want_miss, want_row = _ref_touch(a[base:base + ways].tolist(), key, act, fifo)
            got = a.copy()
            miss = touch(got, base, ways, key, act)
            assert miss == want_miss, (width, ways, trial)
            assert got[base:base + ways].tolist() == want_row, (width, ways, trial)
            assert np.array_equal(np.delete(got, range(base, base + ways)), np.delete(a, range(base, base + ways)))


def _touch_of_word(op, ways, literal, fifo):
    """``op`` (set_touch_at or set_touch_key: the key made from ``blk[j]`` and one more argument)
    jitted with act 1, the way count a constant or a run-time value."""
    if literal:
        @njit(cache=False)
        def touch(arr, base, n, blk, j, arg, op=op, fifo=fifo):
            return op(arr.ctypes.data, base, ways, blk, j, arg, 1, fifo)
    else:
        @njit(cache=False)
        def touch(arr, base, n, blk, j, arg, op=op, fifo=fifo):
            return op(arr.ctypes.data, base, n, blk, j, arg, 1, fifo)
    return touch


def _plain_touch(op, fifo):
    """``op`` (a set_touch) jitted with act 1 and the way count a run-time value: the reference."""
    @njit(cache=False)
    def plain(arr, base, n, key, op=op, fifo=fifo):
        return op(arr.ctypes.data, base, n, key, 1, fifo)
    return plain


@pytest.mark.parametrize("ways", [3, 8, 16])
@pytest.mark.parametrize("literal", [False, True])
@pytest.mark.parametrize("word_dtype", [np.uint32, np.int64, np.uint64])
def test_touch_at_is_touch_of_the_shifted_word(ways, literal, word_dtype):
    """set_touch_at (the key ``blk[j] >> key_sh`` made in the vector registers) gives what
    set_touch of that key gives, on 16/32/64-bit sets, words of 32 or 64 bits, the last word of the
    array included (the load stays inside it)."""
    from tierlab.engine.simd import set_touch, set_touch16, set_touch32, set_touch_at, set_touch_at16, set_touch_at32

    rng = np.random.default_rng(6000 + ways)
    for width, (op, op_at) in {16: (set_touch16, set_touch_at16), 32: (set_touch32, set_touch_at32),
                               64: (set_touch, set_touch_at)}.items():
        for fifo in (False, True):
            at, plain = _touch_of_word(op_at, ways, literal, fifo), _plain_touch(op, fifo)
            dtype = {16: np.int16, 32: np.int32, 64: np.int64}[width]
            sh = 3
            top = min(np.iinfo(dtype).max, np.iinfo(word_dtype).max >> sh)
            keys = rng.choice(np.arange(max(top - 4 * ways, 0), top, dtype=np.int64), size=ways + 1, replace=False)
            blk = (rng.choice(keys, size=9).astype(np.uint64) << np.uint64(sh)).astype(word_dtype)
            blk[1::2] |= word_dtype(5)              # low bits below the shift are dropped
            a = np.full(2 * ways + 8, -1, dtype)
            a[ways:2 * ways] = keys[:ways]
            b = a.copy()
            for j in range(1, len(blk)):
                assert at(a, ways, ways, blk, j, sh) == plain(b, ways, ways, int(blk[j]) >> sh), (width, fifo, j)
                assert np.array_equal(a, b), (width, fifo, j)


@pytest.mark.parametrize("ways", [3, 8, 16])
@pytest.mark.parametrize("literal", [False, True])
@pytest.mark.parametrize("word_dtype", [np.uint32, np.int64, np.uint64])
def test_touch_key_is_touch_of_the_masked_word(ways, literal, word_dtype):
    """set_touch_key (a keyed tier: the key ``blk[j] & key_mask``, broadcast from memory) gives
    what set_touch of that key gives, on sets as wide as the words, words with their top bits set
    (negative as the set's signed words) and low bits to drop, every ``j`` from the first word to
    the last, for masks clearing 1 to 3 bits."""
    from tierlab.engine.simd import set_touch, set_touch32, set_touch_key, set_touch_key32

    rng = np.random.default_rng(6500 + ways)
    bits = np.dtype(word_dtype).itemsize * 8
    op, op_key = (set_touch32, set_touch_key32) if bits == 32 else (set_touch, set_touch_key)
    sdtype = np.int32 if bits == 32 else np.int64
    for fifo in (False, True):
        keyed, plain = _touch_of_word(op_key, ways, literal, fifo), _plain_touch(op, fifo)
        for sh in (1, 2, 3):
            hi = np.uint64((1 << bits) - 1 if word_dtype != np.int64 else (1 << 63) - 1)
            lines = rng.choice(np.arange(int(hi >> np.uint64(sh)) - 4 * ways, int(hi >> np.uint64(sh)), dtype=np.int64),
                               size=ways + 1, replace=False).astype(np.uint64)
            blk = (rng.choice(lines, size=12) << np.uint64(sh)).astype(word_dtype)
            blk[1::2] |= word_dtype((1 << sh) - 1)      # the bits below the tier's block are dropped
            keys = (lines << np.uint64(sh)).astype(word_dtype).view(sdtype)
            a = np.full(2 * ways + 8, -1, sdtype)
            a[ways:2 * ways] = keys[:ways]
            b = a.copy()
            for j in range(len(blk)):
                key = int(np.array([blk[j]], word_dtype).view(sdtype)[0]) & -(1 << sh)
                assert keyed(a, ways, ways, blk, j, -(1 << sh)) == plain(b, ways, ways, key), (fifo, sh, j)
                assert np.array_equal(a, b), (fifo, sh, j)


@njit(cache=False)
def _sum_asking_ahead(a, ahead):
    s = 0
    for i in range(len(a)):
        prefetch(a, i + ahead)
        s += a[i]
    return s


@pytest.mark.parametrize("ahead", [0, 512, 1 << 40, -(1 << 40)])
def test_prefetch_is_a_hint_that_never_faults_or_changes_a_word(ahead):
    a = np.arange(10_000, dtype=np.uint32) * 7
    before = a.copy()
    assert _sum_asking_ahead(a, ahead) == int(before.sum())       # far outside the array too
    assert np.array_equal(a, before)


def test_prefetch_is_compiled_to_a_prefetch_instruction_on_x86():
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"the instruction checked is x86's; this host is {platform.machine()}")
    a = np.arange(16, dtype=np.int64)
    _sum_asking_ahead(a, 512)
    asm = "".join(_sum_asking_ahead.inspect_asm().values())
    assert "prefetch" in asm


# every AVX-512 feature LLVM knows, turned off for a target without AVX-512
_NO_AVX512 = ",".join("-" + f for f in ("avx512f avx512dq avx512cd avx512bw avx512vl avx512ifma avx512vbmi "
                                        "avx512vbmi2 avx512vnni avx512bitalg avx512vpopcntdq avx512bf16 "
                                        "avx512fp16").split())
_TARGETS = {256: ("haswell", "+avx2,+avx,+fma,+bmi,+bmi2,+popcnt,+sse4.2,+lzcnt,+f16c,+movbe," + _NO_AVX512),
            128: ("nehalem", "+sse4.2,+popcnt,-avx,-avx2,-fma,-f16c," + _NO_AVX512)}


@pytest.mark.parametrize("bits", [256, 128])
def test_touch_on_a_target_without_avx512_matches_the_reference(bits, tmp_path):
    """The forms built only where the target has no AVX-512 (an LRU set of one AVX2 register
    updated by a permute from a table row; the blend's lanes read from a table on AVX2 and SSE):
    test_touch_matches_the_reference and test_touch_key_is_touch_of_the_masked_word re-run in a
    process that compiles for such a target (NUMBA_CPU_NAME and NUMBA_CPU_FEATURES, a scratch
    cache), which first checks that it does."""
    import os
    import subprocess
    import sys

    import llvmlite.binding as ll

    need = "avx2" if bits == 256 else "sse4.2"
    if not ll.get_host_cpu_features().get(need, False):
        pytest.skip(f"this host cannot run {need} code")
    name, features = _TARGETS[bits]
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            "from tierlab.engine import simd_tables\n"
            f"assert simd_tables.VECTOR_BITS == {bits}, simd_tables.VECTOR_BITS\n"
            "import test_simd as t\n"
            "for ways in (2, 4, 8, 16):\n"
            "    for literal in (False, True):\n"
            "        for fifo in (False, True):\n"
            "            t.test_touch_matches_the_reference(ways, literal, fifo)\n"
            "for ways in (8, 16):\n"
            "    t.test_touch_key_is_touch_of_the_masked_word(ways, True, t.np.uint32)\n"
            "    t.test_touch_key_is_touch_of_the_masked_word(ways, False, t.np.int64)\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), NUMBA_CPU_NAME=name, NUMBA_CPU_FEATURES=features)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
