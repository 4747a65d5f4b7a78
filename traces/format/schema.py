"""The trace format: the on-disk contract (schemas, names, versions).

A trace is a directory ``NAME.trace/`` holding Arrow IPC table files and ``manifest.json``,
written last. See ``docs/trace-format.md`` for the meaning of every column.

* **Version 1** (one device): ``tensors.arrow``, ``ops.arrow``, ``accesses.arrow``.
* **Version 2** (a system of several devices): every tensor and op names its ``device``; an op that
  takes part in a collective names it (``collective``, -1 for a compute op); ``collectives.arrow``
  holds one row per collective: its kind, the ranks (devices) taking part in group order, its size
  ``S`` and, for an all-to-all, the bytes each rank sends each other rank. Each device has its own
  address space (tensor addresses start at 0 on every device). The reader reads a version-1 trace
  as a one-device trace.
* **Version 3** (written now): the tables of version 1 (one device) or of version 2 (several
  devices), stored in the Arrow IPC **file** form (``ARROW1`` magic and a footer: what
  ``polars.read_ipc`` opens, and what allows memory-mapped zero-copy reading) instead of the stream
  form; the manifest always names ``devices``. Versions 1 and 2 wrote the stream form. The reader
  takes either form for every version (:mod:`tierlab.traces.format.ipc`).
* **Version 4** (address traces, :mod:`tierlab.traces.format.addresses`): a trace of one op over one address
  stream, the manifest's ``kind`` ``"addresses"``: ``tensors.arrow`` and ``ops.arrow`` as version
  1's (one tensor per 2**30-byte region the addresses touch, at a multiple of 2**30; one op),
  ``lines.arrow`` (one column ``word`` = ``line << 1 | is_write``, line numbers of
  ``lines.line_bytes``-byte lines in the trace's address space) and ``straddles.arrow`` (the rows
  of lines continuing the access of the row before). A descriptor trace is still written as version
  3 (its content unchanged, so an older tierlab reads it); an older tierlab refuses an address trace
  as newer than it reads.
* **Version 5** (address traces, written now): version 4's tables, with ``word`` stored as uint32
  where every word of the trace fits (the manifest's ``lines.word_bits`` 32), else as uint64
  (``word_bits`` 64). The reader reads version-4 address traces as before.
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_NAME = "tierlab-trace"
FORMAT_VERSION = 3          # the version a descriptor trace is written as
ADDRESS_VERSION = 5         # the version an address trace is written as (the newest)
READ_VERSIONS = (1, 2, 3, 4, 5)   # every version the reader accepts
MANIFEST = "manifest.json"

TENSORS_FILE = "tensors.arrow"
OPS_FILE = "ops.arrow"
ACCESSES_FILE = "accesses.arrow"
COLLECTIVES_FILE = "collectives.arrow"

TENSORS_SCHEMA = pa.schema([
    ("tensor_id", pa.uint32()),
    ("name", pa.string()),
    ("kind", pa.string()),
    ("layer", pa.int32()),
    ("expert", pa.int32()),
    ("dtype", pa.string()),
    ("address", pa.uint64()),
    ("nbytes", pa.uint64()),
])

OPS_SCHEMA = pa.schema([
    ("op_id", pa.uint32()),
    ("name", pa.string()),
    ("kind", pa.string()),
    ("layer", pa.int32()),
    ("phase", pa.string()),
    ("step", pa.int32()),
    ("tokens", pa.uint32()),
    ("flops", pa.uint64()),
    ("expert", pa.int32()),
    ("pim_eligible", pa.bool_()),
])

ACCESSES_SCHEMA = pa.schema([
    ("op_id", pa.uint32()),
    ("tensor_id", pa.uint32()),
    ("offset", pa.uint64()),
    ("nbytes", pa.uint64()),
    ("count", pa.uint32()),
    ("stride", pa.uint64()),
    ("is_write", pa.bool_()),
])

TABLES = {
    "tensors": (TENSORS_FILE, TENSORS_SCHEMA),
    "ops": (OPS_FILE, OPS_SCHEMA),
    "accesses": (ACCESSES_FILE, ACCESSES_SCHEMA),
}

# ---- version 2: devices and collectives ------------------------------------------------------

TENSORS_SCHEMA_V2 = TENSORS_SCHEMA.append(pa.field("device", pa.int32()))
OPS_SCHEMA_V2 = OPS_SCHEMA.append(pa.field("device", pa.int32())).append(pa.field("collective", pa.int32()))
COLLECTIVES_SCHEMA = pa.schema([
    ("collective_id", pa.uint32()),
    ("kind", pa.string()),
    ("ranks", pa.list_(pa.int32())),          # devices taking part, in group order
    ("size_bytes", pa.uint64()),              # S: see COLLECTIVE_KINDS
    ("send_bytes", pa.list_(pa.uint64())),    # all_to_all: n x n, row i = what rank i sends each rank; else empty
    ("phase", pa.string()),
    ("step", pa.int32()),
    ("layer", pa.int32()),
])

TABLES_V2 = {
    "tensors": (TENSORS_FILE, TENSORS_SCHEMA_V2),
    "ops": (OPS_FILE, OPS_SCHEMA_V2),
    "accesses": (ACCESSES_FILE, ACCESSES_SCHEMA),
    "collectives": (COLLECTIVES_FILE, COLLECTIVES_SCHEMA),
}


def tables(version: int, devices: int = 1) -> dict:
    """The tables of a trace of ``version`` and ``devices``: name -> (file, schema). Version 3
    keeps version 1's tables for one device (so one device replays as before) and version 2's for
    several."""
    if version == 1 or (version >= 3 and devices == 1):
        return TABLES
    return TABLES_V2


# ---- versions 4 and 5: address traces ------------------------------------------------------------

ADDRESS_KIND = "addresses"       # manifest "kind" of an address trace (a descriptor trace has none)
LINES_FILE = "lines.arrow"
STRADDLES_FILE = "straddles.arrow"
LINES_SCHEMA = pa.schema([("word", pa.uint64())])            # line << 1 | is_write
# version 5: the words are uint32 where every word of the trace fits (the manifest's lines.word_bits
# 32: half the bytes to map, check and read), else uint64 (word_bits 64, version 4's column)
LINES_SCHEMA_32 = pa.schema([("word", pa.uint32())])
LINES_SCHEMAS = {32: LINES_SCHEMA_32, 64: LINES_SCHEMA}
STRADDLES_SCHEMA = pa.schema([("row", pa.uint64())])         # a line continuing the access of row - 1
REGION_SHIFT = 30                # an address trace's tensors: one per 2**30-byte region, at k * 2**30
STRADDLE_CONVENTIONS = ("both", "once")   # each line of a straddling access counts, or the access once

ADDRESS_TABLES = {
    "tensors": (TENSORS_FILE, TENSORS_SCHEMA),
    "ops": (OPS_FILE, OPS_SCHEMA),
    "lines": (LINES_FILE, LINES_SCHEMA),
    "straddles": (STRADDLES_FILE, STRADDLES_SCHEMA),
}


# Collective kinds and what their size S is (tierlab.network.schedule counts them):
#   all_reduce      every rank's input, which is also its output
#   all_gather      the gathered output (each rank contributes S / n)
#   reduce_scatter  every rank's input (each keeps S / n of the reduced result)
#   all_to_all      each rank's whole send buffer (uniform case; send_bytes gives the exact split)
#   send_recv       the message, from ranks[0] to ranks[1]
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

# Tensor kinds the generator writes. Readers accept any string; the emulator maps unknown kinds
# to "other" in its breakdowns.
# kv_offload: multi-turn KV copies; state: a state-space layer's fixed recurrent state per sequence;
# kv_index: a sparse-attention indexer's own cached keys (DeepSeek-V3.2), which choose the KV rows attention
# reads. Added after version 3 was fixed: a trace from before holds those keys as kind kv (and reads as
# before); an older tierlab counts kv_index as other.
TENSOR_KINDS = ("weight", "kv", "activation", "kv_offload", "state", "kv_index", "other")
KV_CACHE_KINDS = ("kv", "kv_index")       # what a sequence keeps per position: the KV cache's bytes
PHASES = ("prefill", "decode")

# Default alignment of tensor base addresses (bytes). Every tier's block size must divide every
# tensor address, so no block straddles two tensors; the emulator checks this per chip.
DEFAULT_ALIGNMENT = 64 * 1024
