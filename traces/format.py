"""Trace format v1: the on-disk contract (schemas, names, version).

A trace is a directory ``NAME.trace/`` holding three Arrow IPC stream files and ``manifest.json``,
written last. See the README's "Trace format" section for the meaning of every column.
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_NAME = "tierlab-trace"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

TENSORS_FILE = "tensors.arrow"
OPS_FILE = "ops.arrow"
ACCESSES_FILE = "accesses.arrow"

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

# Tensor kinds the generator writes. Readers accept any string; the emulator maps unknown kinds
# to "other" in its breakdowns.
TENSOR_KINDS = ("weight", "kv", "activation", "kv_offload", "other")   # kv_offload: multi-turn KV copies
PHASES = ("prefill", "decode")

# Default alignment of tensor base addresses (bytes). Every tier's block size must divide every
# tensor address, so no block straddles two tensors; the emulator checks this per chip.
DEFAULT_ALIGNMENT = 64 * 1024
