"""Start-up (issue 42): a command loads only what it uses. The tables that stand in for modules not
loaded (the collective algorithms' names, the commands' lines of ``--help``) are held equal to what
they stand for; fresh interpreters check what ``import tierlab.cli.replay`` and ``tierlab --help``
load."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from tierlab.cli import COMMANDS, SUMMARIES, main


def loaded_after(code: str) -> set[str]:
    """The ``tierlab`` modules a fresh interpreter holds after running ``code``."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('tierlab'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_algorithm_names_are_the_registrys():
    from tierlab.network.algorithm_names import ALGORITHM_NAMES
    from tierlab.network.registry import ALGORITHM_NAMES as REGISTERED

    assert ALGORITHM_NAMES == REGISTERED


def test_a_chip_replays_options_load_no_collective():
    mods = loaded_after("import tierlab.cli.replay, tierlab.cli.run")
    assert "tierlab.cli.replay" in mods
    assert not mods & {"tierlab.network.registry", "tierlab.network.collective", "tierlab.network.ring"}


def test_help_loads_no_command_module():
    mods = loaded_after("from tierlab.cli import main\nmain(['--help'], standalone_mode=False)")
    assert not {m for m in mods if m.startswith("tierlab.cli.")}


def test_summaries_name_every_command():
    assert set(SUMMARIES) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_summary_is_the_commands_own(name):
    cmd = main.get_command(click.Context(main), name)
    assert SUMMARIES[name] == cmd.get_short_help_str(10**6)


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_help_is_the_same_before_and_after_the_commands_load(width):
    group = type(main)(name="tierlab", help=main.help)   # a fresh group of the same class: nothing loaded
    before = group.get_help(click.Context(group, info_name="tierlab", terminal_width=width, max_content_width=width))
    for name in COMMANDS:
        group.get_command(click.Context(group), name)
    assert set(group.commands) == set(COMMANDS)
    after = group.get_help(click.Context(group, info_name="tierlab", terminal_width=width, max_content_width=width))
    assert before == after
    assert all(name in before for name in COMMANDS)
