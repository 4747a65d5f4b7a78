"""What every command says about the files it wrote: ``wrote FILE`` on stderr, one line each."""

from __future__ import annotations

import click


def wrote(path) -> None:
    """``wrote FILE`` on stderr, as ``tierlab trace`` says it: each output a user asked for is named."""
    click.echo(f"wrote {path}", err=True)


def say_written(result) -> None:
    """``wrote FILE`` for each file a library call wrote (``result.written``)."""
    for p in result.written:
        wrote(p)


def show(result, as_json: bool, indent: int = 2) -> None:
    """Print a library result: its ``--json`` or its text, after naming the files it wrote."""
    say_written(result)
    click.echo(result.to_json(indent) if as_json else result.to_text())
