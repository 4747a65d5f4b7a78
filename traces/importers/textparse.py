"""Address-trace text forms parsed in compiled code, straight from the file's bytes.

:func:`parse_lines` reads one chunk of a text trace (a ``uint8`` array: a file read, or a block
of a gzip/xz stream) line by line in compiled code and writes one record per memory access:
byte address, size in bytes, kind (:data:`READ`, :data:`WRITE`, :data:`IFETCH`, :data:`MODIFY`).
No Python runs per record. It stops at the last complete line of a chunk (the caller carries the
rest into the next one) and at the first bad line, which it reports by an error code and the
line's byte range, so the caller can quote it.

Forms (``FORMATS``): ``text`` (an address, ``0x`` hex or decimal, with an optional kind token
before or after it), ``din`` (Dinero IV: ``label address [size]``, hex address), ``csv``
(``address,size,kind``, an optional header line), ``lackey`` (Valgrind Lackey ``--trace-mem=yes``:
``I  addr,size`` / `` L addr,size`` / `` S ...`` / `` M ...``, hex addresses; ``==PID==`` and
``--PID--`` lines are Valgrind's messages, skipped) and ``drcachesim`` (DynamoRIO's drcachesim
``-simulator_type view`` output: ``RECORD INSTR: TID KIND SIZE byte(s) @ 0xADDR ...``; markers,
headers and separators skipped). Blank lines and lines starting with ``#`` are skipped in every form.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from tierlab.common.jit import helper, njit

FORMATS = {"text": 0, "din": 1, "csv": 2, "lackey": 3, "drcachesim": 4}
TEXT, DIN, CSV, LACKEY, DRCACHESIM = range(5)

READ, WRITE, IFETCH, MODIFY = 0, 1, 2, 3      # record kinds (MODIFY: a load then a store)

# error codes of parse_lines (res[3])
OK, MALFORMED, UNKNOWN_RECORD, BINARY, REFUSED_LABEL, TOO_LARGE, ZERO_SIZE = range(7)

# result slots
R_RECORDS, R_CONSUMED, R_LINES, R_ERROR, R_BAD_START, R_BAD_END, R_HEADER = range(7)


@intrinsic
def _at(typingctx, addr, i):
    """The byte at address ``addr + i`` (int64). The helpers take the buffer's address, not the
    array: a call passing an array counts references, which cost more than the parse itself."""
    if not (isinstance(addr, types.Integer) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a = builder.inttoptr(context.cast(builder, args[0], sig.args[0], types.uintp), ir.PointerType(ir.IntType(8)))
        p = builder.gep(a, [context.cast(builder, args[1], sig.args[1], types.intp)])
        return builder.zext(builder.load(p), ir.IntType(64))
    return types.int64(addr, i), codegen


def _pack(word: bytes) -> int:
    v = 0
    for c in word:
        v = v * 256 + c
    return v


# lower-case tokens packed into an integer (at most 8 bytes): compile-time constants
_W_R, _W_W, _W_L, _W_S = _pack(b"r"), _pack(b"w"), _pack(b"l"), _pack(b"s")
_W_LD, _W_ST, _W_READ, _W_WRITE = _pack(b"ld"), _pack(b"st"), _pack(b"read"), _pack(b"write")
_W_LOAD, _W_STORE, _W_IFETCH = _pack(b"load"), _pack(b"store"), _pack(b"ifetch")
_W_PREFETCH, _W_NONFETCHED = _pack(b"prefetch"), _pack(b"non-fetc")


@helper
def _sep(c) -> bool:
    return c == 32 or c == 9 or c == 44


@helper
def _skip(buf, i, e):
    while i < e and (_at(buf, i) == 32 or _at(buf, i) == 9):
        i += 1
    return i


@helper
def _skip_sep(buf, i, e):
    while i < e and _sep(_at(buf, i)):
        i += 1
    return i


@helper
def _hex(buf, i, e):
    """(value, next index, digits; -1 digits: too large for int64)."""
    v = 0
    nd = 0
    while i < e:
        c = _at(buf, i)
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            break
        if v >= 1 << 59:
            return 0, i, -1
        v = v * 16 + d
        nd += 1
        i += 1
    return v, i, nd


@helper
def _dec(buf, i, e):
    v = 0
    nd = 0
    while i < e and 48 <= _at(buf, i) <= 57:
        if v >= 922337203685477580:
            return 0, i, -1
        v = v * 10 + (_at(buf, i) - 48)
        nd += 1
        i += 1
    return v, i, nd


@helper
def _num(buf, i, e):
    """``0x`` hex or decimal."""
    if i + 1 < e and _at(buf, i) == 48 and (_at(buf, i + 1) == 120 or _at(buf, i + 1) == 88):
        v, j, nd = _hex(buf, i + 2, e)
        return v, j, nd
    return _dec(buf, i, e)


@helper
def _word(buf, i, e):
    """(the token at i packed lower-case (first 8 bytes), its end)."""
    v = 0
    j = i
    while j < e and not _sep(_at(buf, j)):
        c = _at(buf, j)
        if 65 <= c <= 90:
            c += 32
        if j - i < 8:
            v = v * 256 + c
        j += 1
    return v, j


@helper
def _kind_of(w, length):
    if length > 5:
        return -1
    if w == _W_R or w == _W_L or w == _W_LD or w == _W_READ or w == _W_LOAD:
        return READ
    if w == _W_W or w == _W_S or w == _W_ST or w == _W_WRITE or w == _W_STORE:
        return WRITE
    return -1


@helper
def _end_ok(buf, j, e):
    """A number must end at a separator or the line's end."""
    return j == e or _sep(_at(buf, j))


@helper
def _line(buf, i, e, fmt, instructions, header):
    """Parse the line ``_at(buf, i:e)`` (no newline, trailing blanks stripped). Returns (error code,
    records written after it, header flag)."""
    p = _skip(buf, i, e)
    if p == e or _at(buf, p) == 35:                     # blank or '#'
        return OK, 0, 0, 0, False, header
    addr = 0
    size = 1
    kind = READ
    if fmt == LACKEY:
        c0 = _at(buf, i)
        if e - i >= 2 and ((c0 == 61 and _at(buf, i + 1) == 61) or (c0 == 45 and _at(buf, i + 1) == 45)):
            return OK, 0, 0, 0, False, header                   # ==PID== / --PID--: Valgrind's messages
        if c0 == 83 and e - i > 2 and _at(buf, i + 1) == 66 and _at(buf, i + 2) == 32:
            return OK, 0, 0, 0, False, header     # SB addr: a superblock (--trace-superblocks=yes)
        if c0 == 73 and e - i > 1 and _at(buf, i + 1) == 32:
            kind = IFETCH
            p = i + 1
        elif c0 == 32 and e - i > 2 and _at(buf, i + 2) == 32 and (_at(buf, i + 1) == 76 or _at(buf, i + 1) == 83 or _at(buf, i + 1) == 77):
            c1 = _at(buf, i + 1)
            kind = READ if c1 == 76 else (WRITE if c1 == 83 else MODIFY)
            p = i + 2
        else:
            return UNKNOWN_RECORD, 0, 0, 0, False, header
        p = _skip(buf, p, e)
        addr, p, nd = _hex(buf, p, e)
        if nd < 0:
            return TOO_LARGE, 0, 0, 0, False, header
        if nd == 0 or p >= e or _at(buf, p) != 44:
            return MALFORMED, 0, 0, 0, False, header
        size, p, nd = _dec(buf, p + 1, e)
        if nd <= 0 or _skip(buf, p, e) != e:
            return MALFORMED, 0, 0, 0, False, header
        if kind == IFETCH and not instructions:
            return (ZERO_SIZE if size < 1 else OK), 0, 0, 0, False, header
    elif fmt == DRCACHESIM:
        if not (48 <= _at(buf, p) <= 57):
            return OK, 0, 0, 0, False, header                   # headers, separators, trailers
        _, p, nd = _dec(buf, p, e)
        p = _skip(buf, p, e)
        if p < e and _at(buf, p) == 58:
            return OK, 0, 0, 0, False, header                   # a trailer "N : total ..."
        _, p, nd2 = _dec(buf, p, e)
        if nd2 <= 0 or p >= e or _at(buf, p) != 58:
            return MALFORMED, 0, 0, 0, False, header
        p = _skip(buf, p + 1, e)
        if p < e and (_at(buf, p) == 84 or _at(buf, p) == 87):   # T<tid> / W<workload>.T<tid> of other versions
            while p < e and not _sep(_at(buf, p)):
                p += 1
        else:
            _, p, nd = _dec(buf, p, e)
            if nd <= 0:
                return MALFORMED, 0, 0, 0, False, header
        p = _skip(buf, p, e)
        if p >= e or _at(buf, p) == 60:                 # <marker: ...>, <thread exited>
            return OK, 0, 0, 0, False, header
        w, q = _word(buf, p, e)
        length = q - p
        if w == _W_IFETCH and length == 6:
            kind = IFETCH
        elif w == _W_READ and length == 4:
            kind = READ
        elif w == _W_WRITE and length == 5:
            kind = WRITE
        elif length >= 8 and w == _W_PREFETCH:
            kind = READ                            # software prefetches: reads of their line
        elif length >= 8 and w == _W_NONFETCHED:
            return OK, 0, 0, 0, False, header
        else:
            return UNKNOWN_RECORD, 0, 0, 0, False, header
        p = _skip(buf, q, e)
        size, p, nd = _dec(buf, p, e)
        if nd <= 0:
            return MALFORMED, 0, 0, 0, False, header
        p = _skip(buf, p, e)
        if p >= e or _at(buf, p) != 98:                 # byte(s)
            return MALFORMED, 0, 0, 0, False, header
        while p < e and not _sep(_at(buf, p)):
            p += 1
        p = _skip(buf, p, e)
        if p >= e or _at(buf, p) != 64:                 # @
            return MALFORMED, 0, 0, 0, False, header
        p = _skip(buf, p + 1, e)
        addr, p, nd = _num(buf, p, e)
        if nd < 0:
            return TOO_LARGE, 0, 0, 0, False, header
        if nd == 0 or not _end_ok(buf, p, e):
            return MALFORMED, 0, 0, 0, False, header
        if kind == IFETCH and not instructions:
            return (ZERO_SIZE if size < 1 else OK), 0, 0, 0, False, header
    elif fmt == DIN:
        label, p, nd = _dec(buf, p, e)
        if nd <= 0 or not _end_ok(buf, p, e):
            return MALFORMED, 0, 0, 0, False, header
        if label == 3 or label == 4:
            return REFUSED_LABEL, 0, 0, 0, False, header
        if label > 2:
            return MALFORMED, 0, 0, 0, False, header
        kind = READ if label == 0 else (WRITE if label == 1 else IFETCH)
        p = _skip(buf, p, e)
        if p + 1 < e and _at(buf, p) == 48 and (_at(buf, p + 1) == 120 or _at(buf, p + 1) == 88):
            p += 2
        addr, p, nd = _hex(buf, p, e)
        if nd < 0:
            return TOO_LARGE, 0, 0, 0, False, header
        if nd == 0 or not _end_ok(buf, p, e):
            return MALFORMED, 0, 0, 0, False, header
        p = _skip(buf, p, e)
        if p < e:
            size, p, nd = _num(buf, p, e)
            if nd < 0:
                return TOO_LARGE, 0, 0, 0, False, header
            if nd == 0 or _skip(buf, p, e) != e:
                return MALFORMED, 0, 0, 0, False, header
        if kind == IFETCH and not instructions:
            return (ZERO_SIZE if size < 1 else OK), 0, 0, 0, False, header
    elif fmt == CSV:
        if not (48 <= _at(buf, p) <= 57):
            if header == 0:                        # a header line, before any record
                return OK, 0, 0, 0, False, 1
            return MALFORMED, 0, 0, 0, False, header
        addr, p, nd = _num(buf, p, e)
        if nd < 0:
            return TOO_LARGE, 0, 0, 0, False, header
        if nd == 0:
            return MALFORMED, 0, 0, 0, False, header
        p = _skip(buf, p, e)
        if p < e:
            if _at(buf, p) != 44:
                return MALFORMED, 0, 0, 0, False, header
            p = _skip(buf, p + 1, e)
            if p < e and _at(buf, p) != 44:
                size, p, nd = _num(buf, p, e)
                if nd < 0:
                    return TOO_LARGE, 0, 0, 0, False, header
                if nd == 0:
                    return MALFORMED, 0, 0, 0, False, header
                p = _skip(buf, p, e)
            if p < e:
                if _at(buf, p) != 44:
                    return MALFORMED, 0, 0, 0, False, header
                p = _skip(buf, p + 1, e)
                if p < e:
                    w, q = _word(buf, p, e)
                    kind = _kind_of(w, q - p)
                    if kind < 0 or _skip(buf, q, e) != e:
                        return MALFORMED, 0, 0, 0, False, header
    else:                                          # text
        if 48 <= _at(buf, p) <= 57:
            addr, p, nd = _num(buf, p, e)
            if nd < 0:
                return TOO_LARGE, 0, 0, 0, False, header
            if nd == 0 or not _end_ok(buf, p, e):
                return MALFORMED, 0, 0, 0, False, header
            p = _skip_sep(buf, p, e)
            if p < e:
                w, q = _word(buf, p, e)
                kind = _kind_of(w, q - p)
                if kind < 0 or _skip_sep(buf, q, e) != e:
                    return MALFORMED, 0, 0, 0, False, header
        else:
            w, q = _word(buf, p, e)
            kind = _kind_of(w, q - p)
            if kind < 0:
                return MALFORMED, 0, 0, 0, False, header
            p = _skip_sep(buf, q, e)
            if p >= e or not (48 <= _at(buf, p) <= 57):
                return MALFORMED, 0, 0, 0, False, header
            addr, p, nd = _num(buf, p, e)
            if nd < 0:
                return TOO_LARGE, 0, 0, 0, False, header
            if nd == 0 or _skip_sep(buf, p, e) != e:
                return MALFORMED, 0, 0, 0, False, header
    if size < 1:
        return ZERO_SIZE, 0, 0, 0, False, header
    if addr > (1 << 62) - size:
        return TOO_LARGE, 0, 0, 0, False, header
    return OK, addr, size, kind, True, 1


@njit(nogil=True)
def parse_lines(buf, n, fmt, instructions, final, header, out_addr, out_size, out_kind, res):
    """Parse the complete lines of ``buf[:n]`` (all of it when ``final``) in form ``fmt``.

    Writes records to ``out_addr``/``out_size``/``out_kind`` (room for ``n // 2 + 1``) and sets
    ``res``: records, bytes consumed, lines consumed, error code, the bad line's start and end
    (byte offsets in ``buf``), the header flag (1 once a record or a CSV header was seen; pass it
    on to the next chunk as ``header``). Stops at the first bad line, whose line is not counted.
    A NUL byte or another control character (not tab or carriage return) is :data:`BINARY`."""
    i = 0
    k = 0
    lines = 0
    res[R_ERROR] = OK
    ptr = buf.ctypes.data            # ``buf`` outlives the loop
    while i < n:
        e = i
        binary = False
        while e < n:
            c = buf[e]
            if c == 10:
                break
            if c < 32 and c != 9 and c != 13:
                binary = True
            e += 1
        if e == n and not final:
            break
        le = e
        while le > i and (buf[le - 1] == 13 or buf[le - 1] == 32 or buf[le - 1] == 9):
            le -= 1
        if binary:
            err = BINARY
        else:
            err, addr, size, kind, record, header = _line(ptr, i, le, fmt, instructions, header)
            if record:
                out_addr[k] = addr
                out_size[k] = size
                out_kind[k] = kind
                k += 1
        if err != OK:
            res[R_ERROR] = err
            res[R_BAD_START] = i
            res[R_BAD_END] = e
            break
        lines += 1
        i = e + 1
    res[R_RECORDS] = k
    res[R_CONSUMED] = min(i, n)
    res[R_LINES] = lines
    res[R_HEADER] = header


@njit(nogil=True)
def to_lines(addr, size, kind, n, sh, regions, region_lo, region_end, n_regions, table, row0, out_words, out_cont,
             stats):
    """Records ``[:n]`` as line words ``line << 1 | is_write`` in the trace's address space.

    Each record touches the ``2**sh``-byte lines covering ``[addr, addr + size)``, in address
    order; a :data:`MODIFY` touches them as reads, then as writes; an :data:`IFETCH` is a read.
    The 2**30-byte region of a line is mapped to a tensor index by ``regions`` (the regions seen,
    in first-seen order, ``n_regions[0]`` of them; a new one is appended, -1 returned when full;
    ``table``: a hash of them, a power of two of at least twice ``len(regions)`` slots, -1 empty);
    line ``L`` of region index ``t`` becomes ``(t << 30 | L << sh & (2**30 - 1)) >> sh``.
    ``region_lo[t]`` / ``region_end[t]``: the start of the lowest and the end of the highest line
    touched in region ``t`` (bytes from its start).
    The row (``row0`` + index) of each line after the first of an access goes to ``out_cont`` (from
    its start; ``stats[6]`` grows by their number).
    ``stats`` (added to): accesses (a MODIFY is two), lines, read lines, write lines, straddling
    accesses, instruction fetches, continuation rows, read accesses, write accesses. Returns the
    words written (-1: more regions than ``regions`` holds)."""
    m = 0
    nc = 0
    last_r = -1
    last_t = 0
    rmask = (1 << 30) - 1
    for j in range(n):
        a = addr[j]
        first = a >> sh
        last = (a + size[j] - 1) >> sh
        kd = kind[j]
        passes = 2 if kd == MODIFY else 1
        for ps in range(passes):
            w = 1 if (kd == WRITE or (kd == MODIFY and ps == 1)) else 0
            stats[0] += 1
            stats[7 + w] += 1
            if last > first:
                stats[4] += 1
            if kd == IFETCH:
                stats[5] += 1
            for ln in range(first, last + 1):
                b = ln << sh
                r = b >> 30
                if r != last_r:
                    # open addressing over ``table`` (2 * len(regions) slots, -1 empty): region index
                    h = ((r * 0x9E3779B1) & 0xFFFFFFFF) & (len(table) - 1)
                    t = -1
                    while table[h] >= 0:
                        if regions[table[h]] == r:
                            t = table[h]
                            break
                        h = (h + 1) & (len(table) - 1)
                    if t < 0:
                        if n_regions[0] == len(regions):
                            return -1
                        t = n_regions[0]
                        regions[t] = r
                        region_lo[t] = 1 << 30
                        region_end[t] = 0
                        table[h] = t
                        n_regions[0] += 1
                    last_r = r
                    last_t = t
                off = b & rmask
                end = off + (1 << sh)
                if end > region_end[last_t]:
                    region_end[last_t] = end
                if off < region_lo[last_t]:
                    region_lo[last_t] = off
                out_words[m] = (((last_t << 30) | off) >> sh) << 1 | w
                if ln > first:
                    out_cont[nc] = row0 + m
                    nc += 1
                m += 1
                stats[1] += 1
                stats[2] += 1 - w
                stats[3] += w
    stats[6] += nc
    return m


@njit(nogil=True)
def count_lines(addr, size, kind, n, sh):
    """The line words :func:`to_lines` will write for records ``[:n]``."""
    m = 0
    for j in range(n):
        k = ((addr[j] + size[j] - 1) >> sh) - (addr[j] >> sh) + 1
        m += 2 * k if kind[j] == MODIFY else k
    return m
