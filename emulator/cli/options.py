"""Options every kind of command shares, as decorators (the library's option groups are generated
in :mod:`tierlab.cli.params`)."""

from __future__ import annotations

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
force_option = click.option("--force", is_flag=True, help="Replace an existing output.")
