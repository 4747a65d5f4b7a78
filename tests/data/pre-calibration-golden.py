"""Golden replay figures from the code before the calibrated latency (tests/data/pre-calibration-golden.json).

Made with the tree before it (commit d996a9e) first on the path:
    git archive d996a9e | tar -x -C /tmp/old && PYTHONPATH=/tmp/old python tests/data/pre-calibration-golden.py \
        /tmp/old/tests > tests/data/pre-calibration-golden.json
"""
import json, sys, tempfile
from pathlib import Path
from tierlab.traces.model.spec import load_model
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.lowering.generate import generate_trace
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.analysis.result import to_json
from tierlab.chip.chipfile import chip_hash, load_chip
import tierlab
print(tierlab.__file__, file=sys.stderr)
TESTS = Path(sys.argv[1])
CASES = [("tiny-llama", str(TESTS / "data/models/tiny-llama.json"), ["h100", "a100", "h200", "gh200", "sn40l", "groq-lpu"]),
         ("qwen2-0.5b", "qwen2-0.5b", ["h100", "a100", "sn40l"])]
KEEP = ("tiers", "links", "energy_j", "per_token", "latency_s", "by_kind", "counts")
out = {}
with tempfile.TemporaryDirectory() as tmp:
    for name, model, chips in CASES:
        tr = generate_trace(load_model(model), RunConfig(prompt=16, context=32, generate=2), Path(tmp) / f"{name}.trace")
        for c in chips:
            d = to_json(replay_trace(tr, c))
            out[f"{name}@{c}"] = {k: d[k] for k in KEEP}
import tomllib
from tierlab.chip.chipfile import chip_from_dict
out["code_chip_sha256"] = chip_hash(chip_from_dict(tomllib.loads((TESTS.parent / "configs/chips/h100.toml").read_text())))
print(json.dumps(out, indent=1, sort_keys=True))
