"""The API's keyword options, checked against the CLI's own click options and run through the
command functions the CLI runs.

A public name is the option's long name with ``_`` for ``-`` (``--policy-seed`` is ``policy_seed``,
``--pim/--no-pim`` is ``pim``, ``--html`` is ``html``); its default and its check are the option's.
``None`` means "not given" (the option's default). A name the command lacks, or a value of the
wrong Python type, is a :class:`tierlab.common.errors.UsageError` naming the argument, before any work.
"""

from __future__ import annotations

import os
from typing import Any

import click
from click.core import ParameterSource

from tierlab.common.errors import UsageError
from tierlab.common.suggest import did_you_mean


def public_name(p: click.Parameter) -> str:
    """``--policy-seed`` -> ``policy_seed``; an argument keeps its name."""
    long = [o for o in getattr(p, "opts", ()) if o.startswith("--")]
    return (long[0][2:] if long else p.name).replace("-", "_")


def option_names(command: click.Command, exclude=()) -> dict[str, click.Parameter]:
    """Public name -> click option of ``command`` (its arguments, ``--json`` and ``exclude`` left out)."""
    out = {}
    for p in command.params:
        if isinstance(p, click.Option) and p.name != "as_json" and p.name not in exclude:
            out[public_name(p)] = p
    return out


def _kind(p: click.Parameter) -> str:
    t = p.type
    if isinstance(t, click.types.BoolParamType) or getattr(p, "is_flag", False):
        return "bool"
    if isinstance(t, click.types.IntParamType) or t.name == "integer":
        return "int"
    if isinstance(t, click.types.FloatParamType):
        return "float"
    if isinstance(t, click.Choice):
        return "choice"
    return "text"


_EXPECTED = {"bool": "True or False", "int": "an integer", "float": "a number", "choice": "a string",
             "text": "a string or path"}


def _one(ctx: click.Context, p: click.Parameter, name: str, v: Any, passthrough: tuple) -> Any:
    if passthrough and isinstance(v, passthrough):
        return v
    kind = _kind(p)
    ok = {"bool": isinstance(v, bool),
          "int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "choice": isinstance(v, str),
          "text": isinstance(v, (str, os.PathLike))}[kind]
    if not ok:
        extra = ", or a loaded object" if passthrough else ""
        raise UsageError(f"expected {_EXPECTED[kind]}{extra}, got {type(v).__name__} {v!r}", field=name)
    if kind == "text":
        v = os.fspath(v)
    if kind == "bool":
        return v
    try:
        return p.type.convert(v, p, ctx)
    except click.BadParameter as err:
        raise UsageError(err.format_message(), field=name) from None


def convert(ctx: click.Context, p: click.Parameter, name: str, v: Any, passthrough: tuple = ()) -> Any:
    """``v`` checked and converted as the CLI converts the option's text."""
    if getattr(p, "multiple", False):
        if isinstance(v, (str, os.PathLike)):
            v = (v,)
        if not isinstance(v, (list, tuple)):
            raise UsageError(f"expected a string or a list of strings, got {type(v).__name__} {v!r}", field=name)
        return tuple(_one(ctx, p, name, x, passthrough) for x in v)
    return _one(ctx, p, name, v, passthrough)


_UNSET = getattr(click.core, "UNSET", None)     # click >= 8.3: the default of an option without one


def _default(ctx: click.Context, p: click.Parameter) -> Any:
    """The value click gives ``p`` when the command line leaves it out."""
    value = p.get_default(ctx)
    if value is None or value is _UNSET:
        return () if getattr(p, "multiple", False) else None
    return p.type_cast_value(ctx, value)


def call(command: click.Command, given: dict, fixed: dict, *, exclude=(), passthrough: dict | None = None,
         function: str = "", also=()):
    """Run ``command``'s function with ``given`` (public names; ``None`` = default) and ``fixed``
    (click parameter names, already checked), the rest at the options' defaults, in a click context
    that knows which options were given (as the command line would)."""
    names = option_names(command, exclude)
    for k in given:
        if k not in names:
            raise UsageError(f"unknown option of {function or command.name}(); {did_you_mean(k, sorted({*names, *also}))}",
                             field=k)
    ctx = click.Context(command, info_name=command.name)
    kw = {}
    by_param = {p.name: (n, p) for n, p in names.items()}
    for p in command.params:
        if p.name in fixed:
            kw[p.name] = fixed[p.name]
            ctx.set_parameter_source(p.name, ParameterSource.COMMANDLINE)
            continue
        if p.name not in by_param:
            if p.name == "as_json":
                kw[p.name] = True
            elif isinstance(p, click.Option) or p.name in exclude:
                kw[p.name] = _default(ctx, p)
                ctx.set_parameter_source(p.name, ParameterSource.DEFAULT)
            continue
        name, _ = by_param[p.name]
        if given.get(name) is not None:
            kw[p.name] = convert(ctx, p, name, given[name], (passthrough or {}).get(name, ()))
            ctx.set_parameter_source(p.name, ParameterSource.COMMANDLINE)
        else:
            kw[p.name] = _default(ctx, p)
            ctx.set_parameter_source(p.name, ParameterSource.DEFAULT)
    with ctx:
        return command.callback(**kw)
