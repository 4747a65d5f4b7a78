"""Hashes of the traces of 20 model presets, to show a refactor leaves every trace byte-identical.

Each model is traced (``context`` 64, ``prompt`` 16, ``generate`` 2, ``batch`` 2; the sharded ones at
``tp`` 2) through the Python API; the hash covers every Arrow table of the trace and the manifest
with its volatile fields (creation time, tool version, paths) left out. Prints one JSON object:
``{"traces": {model: sha256}, "machine": ...}``. Compare two runs (before and after a change) with
``diff``; the figures are not timings, so load does not move them.

    python benchmarks/trace_hashes.py > after.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

MODELS = ("gpt2", "opt-125m", "llama-3.1-8b", "llama-2-7b", "mistral-7b", "qwen2-0.5b", "qwen3-8b",
          "gemma-2-2b", "gemma-3-1b", "phi-3-mini-4k", "falcon-7b", "mixtral-8x7b", "olmoe-1b-7b",
          "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "jamba-v0.1", "mamba-codestral-7b", "qwen3-next-80b-a3b",
          "gpt-oss-20b", "chatglm3-6b")
SHARDED = ("llama-3.1-8b", "mixtral-8x7b")
VOLATILE = {"created", "created_at", "tool", "tool_version", "version_of_tool", "path", "source", "config_path"}


def _clean(v):
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in sorted(v.items()) if k not in VOLATILE}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def digest(trace_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(trace_dir.rglob("*")):
        if p.is_file() and p.name != "manifest.json":
            h.update(p.name.encode())
            h.update(p.read_bytes())
    h.update(json.dumps(_clean(json.loads((trace_dir / "manifest.json").read_text())), sort_keys=True).encode())
    return h.hexdigest()


def main() -> None:
    import tierlab

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, m in enumerate(MODELS):
            for tp in ((1, 2) if m in SHARDED else (1,)):
                path = Path(tmp) / f"{m}-tp{tp}.trace"
                tierlab.trace(m, context=64, prompt=16, generate=2, batch=2, tp=tp, path=path)
                out[f"{m} tp{tp}"] = digest(path)
            print(f"[{i + 1}/{len(MODELS)}] {m}", file=sys.stderr)
    print(json.dumps({"traces": out, "machine": machine()}, indent=2))


if __name__ == "__main__":
    main()
