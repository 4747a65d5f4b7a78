"""Click options generated from the library's option groups (:mod:`tierlab.api.settings`), so that a
default and a help text are written once, and the one edge where a parameter becomes a flag.

An option's python name is the field's name (``policy_seed``); its flag is ``--`` + the name with
``-`` for ``_`` unless the field says otherwise. :func:`flag_of` turns a library error's parameter
name into the flag the command line spells (``max_batch_tokens`` -> ``--max-batch-tokens``).
"""

from __future__ import annotations

import re
from dataclasses import fields

import click

from tierlab.api.settings import Collectives, Execution, ReplaySettings, Views, Workload, choices_of
from tierlab.cli.options import force_option, json_option  # noqa: F401  (one import for the commands)


class LenientInt(click.ParamType):
    """An integer, or the raw text unchanged, so that the library reports it in tierlab's one-line form
    naming the parameter (click's own BadParameter would print a multi-line usage message)."""

    name = "integer"

    def convert(self, value, param, ctx):
        try:
            return int(value)
        except (TypeError, ValueError):
            return value


INT = LenientInt()


def click_option(cls, f, *, help: str | None = None, required: bool = False):
    """The click option of field ``f`` of settings group ``cls``."""
    m = f.metadata
    long = m["flag"] or "--" + f.name.replace("_", "-")
    decls = ([m["short"]] if m["short"] else []) + [long, f.name]
    kw = dict(help=help or m["help"], metavar=m["metavar"])
    if m["kind"] == "bool":
        if m["switch"]:
            return click.option(long, f.name, is_flag=True, default=f.default, help=kw["help"])
        return click.option(f"{long}/--no-{long[2:]}", f.name, default=f.default, show_default=True, help=kw["help"])
    choices = choices_of(f)
    if choices is not None:
        kw["type"] = click.Choice([c for c in choices if c is not None])
    elif m["kind"] == "int":
        kw["type"] = INT
    elif m["kind"] == "float":
        kw["type"] = float
    if m["kind"] == "texts":
        kw["multiple"] = True
        return click.option(*decls, **kw)
    if f.default is None:
        if m["cli_default"]:
            kw["help"] += f" [default: {m['cli_default']}]"
        return click.option(*decls, default=None, required=required, **kw)
    return click.option(*decls, default=f.default, show_default=True, required=required, **kw)


def options(cls, *, exclude=(), only=None, help: dict | None = None, required=()):
    """A decorator adding the options of settings group ``cls`` (``only`` those, or all but ``exclude``)."""
    chosen = [f for f in fields(cls) if f.name not in exclude and (only is None or f.name in only)]

    def decorate(fn):
        for f in reversed(chosen):
            fn = click_option(cls, f, help=(help or {}).get(f.name), required=f.name in required)(fn)
        return fn

    return decorate


workload_options = options(Workload)
replay_options = options(ReplaySettings)
execution_options = options(Execution)
collective_options = options(Collectives)
view_options = options(Views)

capture_option = click.option(
    "--capture", is_flag=True,
    help="Build MODEL with Hugging Face Transformers on PyTorch's meta device (no weights), record the run's "
         "operators and lower them (the capture extra; see docs/capture.md). A family with no hand lowering "
         "takes this path by itself.")


def given(kw: dict, names) -> dict:
    """The entries of a command's keyword arguments named in ``names``."""
    return {k: kw[k] for k in names if k in kw}


_WORD = re.compile(r"\b[a-z][a-z0-9_]*\b")


def flag_of(field: str, command: click.Command | None) -> str:
    """A library error's ``field`` as the command line spells it: each parameter name of ``command``
    in it becomes its flag (``tp`` -> ``--tp``, ``model`` -> ``MODEL``); other words stay."""
    if not field or command is None:
        return field
    spelled = {}
    for p in command.params:
        if isinstance(p, click.Argument):
            spelled[p.name] = p.human_readable_name
            continue
        longs = [o for o in p.opts if o.startswith("--")]
        flag = longs[0] if longs else p.opts[0]
        spelled[p.name] = flag
        if longs:                       # the long option's own name too (--tier of a parameter tier_name)
            spelled.setdefault(longs[0][2:].replace("-", "_"), flag)
    for group in (Workload, ReplaySettings, Execution, Collectives, Views):   # a trace option of a replay's
        for f in fields(group):                                                  # trace (--tp): its flag
            spelled.setdefault(f.name, f.metadata["flag"] or "--" + f.name.replace("_", "-"))
    for name in list(spelled):          # a command of several (--systems) answers for one (system)
        if name.endswith("s"):
            spelled.setdefault(name[:-1], spelled[name])
    if field in spelled:
        return spelled[field]
    if field.startswith("-") or "." in field or "[" in field:
        return field
    words = _WORD.findall(field)
    if not words or any(w not in spelled and w not in ("or", "and") for w in words):
        return field
    return _WORD.sub(lambda m: spelled.get(m.group(0), m.group(0)), field)
