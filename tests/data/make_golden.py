"""Regenerate the golden format-v1 traces in tests/data (run from the repository root).

- ``golden-v1-synthetic.trace``: written with pyarrow alone, straight from the spec (model and run
  null, dictionary-encoded strings, several record batches) — any tool can produce a valid trace.
- ``golden-v1-tiny-llama.trace``: written by tierlab from ``models/tiny-llama.json``
  (prompt 4, generate 2, batch 2, alignment 4 KiB).

Only regenerate when the format or the lowering changes on purpose; tests compare against these.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from tierlab.traces.format import schema as fmt  # noqa: E402

SYN_TENSORS = [  # id, name, kind, layer, expert, dtype, address, nbytes
    (0, "w0", "weight", 0, -1, "bf16", 0, 8192),
    (1, "kv0", "kv", 0, -1, "bf16", 65536, 4096),
    (2, "x", "activation", -1, -1, "bf16", 131072, 256),
]
SYN_OPS = [  # id, name, kind, layer, phase, step, tokens, flops, expert, pim
    (0, "proj", "linear", 0, "prefill", -1, 4, 16384, -1, False),
    (1, "attn", "attention", 0, "decode", 0, 1, 512, -1, True),
    (2, "proj", "linear", 0, "decode", 0, 1, 8192, -1, True),
]
SYN_ACCESSES = [  # op, tensor, offset, nbytes, count, stride, write
    (0, 0, 0, 8192, 1, 0, False),
    (0, 2, 0, 64, 4, 64, False),
    (0, 1, 0, 1024, 4, 1024, True),
    (1, 1, 0, 1024, 2, 2048, False),
    (1, 2, 192, 64, 1, 0, True),
    (2, 0, 0, 4096, 2, 4096, False),
    (2, 2, 0, 32, 1, 0, True),
]


def write_synthetic(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    for rows, (file, schema), split in ((SYN_TENSORS, fmt.TABLES["tensors"], 2), (SYN_OPS, fmt.TABLES["ops"], 2),
                                        (SYN_ACCESSES, fmt.TABLES["accesses"], 3)):
        cols = list(zip(*rows))
        arrays = []
        fields = []
        for f, c in zip(schema, cols):
            a = pa.array(list(c), type=f.type)
            if pa.types.is_string(f.type):
                a = a.dictionary_encode()
            arrays.append(a)
            fields.append(pa.field(f.name, a.type))
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        with pa.OSFile(str(out / file), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.to_batches(max_chunksize=split):
                w.write_batch(b)
    manifest = {"format": "tierlab-trace", "version": 1, "generator": "hand-written (pyarrow)", "model": None,
                "run": None, "tables": {"tensors": len(SYN_TENSORS), "ops": len(SYN_OPS),
                                        "accesses": len(SYN_ACCESSES)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


TINY_RUN = dict(prompt=4, generate=2, batch=2, alignment=4096)


def write_tiny(out: Path) -> None:
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    generate_trace(load_model(HERE / "models" / "tiny-llama.json"), RunConfig(**TINY_RUN), out, force=True)


if __name__ == "__main__":
    write_synthetic(HERE / "golden-v1-synthetic.trace")
    write_tiny(HERE / "golden-v1-tiny-llama.trace")
    print("wrote golden traces in", HERE)
