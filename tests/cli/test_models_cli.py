"""``tierlab models`` lists every preset with its family and layer pattern; ``--families`` every
family of the table with its presets."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tierlab.cli import main
from tierlab.traces.model.families import FAMILIES
from tierlab.traces.model.spec import list_presets, load_model


def test_models_lists_every_preset_with_its_attention():
    r = CliRunner().invoke(main, ["models"])
    assert r.exit_code == 0
    lines = {line.split()[0]: line for line in r.output.splitlines()[2:]}
    assert set(lines) == set(list_presets())
    assert "sliding 128 x12, full x12" in lines["gpt-oss-20b"]
    assert "mamba x28, full x4" in lines["jamba-v0.1"] and "9,175,040" in lines["jamba-v0.1"]


def test_models_families_lists_the_table():
    r = CliRunner().invoke(main, ["models", "--families", "--json"])
    assert r.exit_code == 0
    rows = {x["family"]: x for x in json.loads(r.stdout)}
    assert set(rows) == set(FAMILIES) | {"chatglm"}
    for name in list_presets():
        assert name in rows[load_model(name).family]["presets"]
    assert "GptOssForCausalLM" in rows["gpt_oss"]["architectures"]
