"""The ``tierlab`` command: a click group whose subcommands live one per module in this package.

Library code raises :class:`traces.errors.TierlabError`; only here is it turned into one line on
stderr and exit status 2. Ctrl-C prints one line and exits 130.
"""

from __future__ import annotations

import importlib
import sys

import click

from traces.errors import TierlabError

# One line per subcommand module; each defines a click command named ``command``.
COMMANDS = (
    "emulator.cli.trace",
    "emulator.cli.info",
    "emulator.cli.models",
    "emulator.cli.mrc",
    "emulator.cli.bench",
    "emulator.cli.chips",
)


class TierlabGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TierlabError as err:
            click.echo(f"tierlab: error: {err}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("tierlab: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(0)


@click.group(cls=TierlabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tierlab")
def main() -> None:
    """tierlab: how many bytes move between which memory tiers per token, and what it costs."""


for _name in COMMANDS:
    try:
        _mod = importlib.import_module(_name)
    except ModuleNotFoundError as _err:  # a command not built yet must not break the others
        if _err.name != _name:
            raise
        continue
    main.add_command(_mod.command)
