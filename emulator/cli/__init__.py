"""The ``tierlab`` command: a click group whose subcommands live one per module in this package.

Library code raises :class:`tierlab.common.errors.TierlabError`; only here is it turned into one line on
stderr and exit status 2. Ctrl-C prints one line and exits 130; SIGTERM likewise, exit 143 (temporary
outputs are removed on the way out in both cases). The console script is :func:`script`.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import signal
import sys
import threading
import warnings

import click

from tierlab.common.errors import TierlabError

# One line per subcommand: its name and the module defining it as a click command named
# ``command``. A module is imported only when its command runs (or help lists them all): a command
# pays for its own imports, not for every other command's.
COMMANDS = {
    "trace": "tierlab.cli.trace",
    "info": "tierlab.cli.info",
    "models": "tierlab.cli.models",
    "mrc": "tierlab.cli.mrc",
    "bench": "tierlab.cli.bench",
    "chips": "tierlab.cli.chips",
    "systems": "tierlab.cli.systems",
    "collectives": "tierlab.cli.collectives",
    "replay": "tierlab.cli.replay",
    "run": "tierlab.cli.run",
    "throughput": "tierlab.cli.throughput",
    "compare": "tierlab.cli.compare",
    "capacity": "tierlab.cli.capacity",
    "sweep": "tierlab.cli.sweep",
    "export": "tierlab.cli.export",
    "import": "tierlab.cli.import_",
    "requests": "tierlab.cli.requests",
}


# Each command's line in ``tierlab --help`` (its help's first sentence, as click shortens it), so that
# listing the commands loads none of their modules (0.3 s of imports; tests/cli/test_cli_imports.py holds
# each equal to its command's own). A command missing here is loaded to list it.
SUMMARIES = {
    "trace": 'Lower MODEL (a preset name, a config.json, or a directory holding one) into a trace.',
    "info": 'Summarise TRACE: tables, parameters, FLOPs, bytes read/written by phase and tensor kind, per step.',
    "models": 'List model presets (configs/models) with their dimensions and parameter counts.',
    "mrc": "Exact LRU (and OPT) miss-ratio curve of one tier, every capacity in one pass; or, given a request trace and no --tier, the prefix cache's hit curve.",
    "bench": 'Run benchmarks/bench_NAME.py scripts (default: all) and print their results.',
    "chips": 'List the chip presets, or show one hierarchy (a preset NAME or a .toml file).',
    "systems": 'List the system presets, or show one system (a preset NAME or a .toml FILE).',
    "collectives": 'All-reduce time and bus bandwidth by message size, modelled (and measured with --measured).',
    "replay": 'Replay TRACE on a chip, or a trace of several devices on a system: bytes per tier and link, hits, energy and latency per token.',
    "run": 'Trace MODEL (preset, config.json or directory) and replay it on a chip or a system.',
    "throughput": 'The serving curve of MODEL: output tokens/s against tokens/s per user, from continuous batching whose representative steps are replayed exactly.',
    "compare": 'Replay one trace of MODEL on every chip (and system) and show the per-token figures side by side.',
    "capacity": "The longest context whose weights + KV + activation workspace fit a chip's memory or a budget; with --context, the largest batch.",
    "sweep": 'Sweep a grid of models x chips/systems x run options x chip overrides; a row per point.',
    "export": 'Export TRACE: its tables as Parquet, or the memory requests reaching one tier of a chip.',
    "import": 'Import FILE (addresses, optionally sizes and read/write) as an address trace of one op.',
    "requests": 'Serve the request stream REQUESTS (Mooncake JSONL, Azure CSV, CSV or Parquet; gzip/xz) open loop: continuous batching admits each request within the KV left in HBM, finds its cached prefix in the highest tier holding it and loads it, or recomputes it where that is faster.',
}

class _Interrupted(Exception):
    """Ctrl-C inside a command, carried past click (which would print an empty line for it)."""


class _Terminated(BaseException):
    """SIGTERM (``kill``, ``timeout``, a job scheduler): unwinds like Ctrl-C, so every temporary
    output is removed on the way out, then exits 143."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A library warning (e.g. a chip-file key with no effect) as one line on stderr."""
    click.echo(f"tierlab: warning: {message}", err=True)


class TierlabGroup(click.Group):
    """Turns every failure on bad input into one line on stderr and a non-zero exit, no traceback.
    Subcommands are loaded from :data:`COMMANDS` when first asked for."""

    def list_commands(self, ctx):
        return sorted(set(self.commands) | set(COMMANDS))

    def format_commands(self, ctx, formatter):
        """The commands' table of ``--help``, as click's, from :data:`SUMMARIES` for the commands not
        loaded yet."""
        rows = []
        for name in self.list_commands(ctx):
            if name not in self.commands and name in SUMMARIES:
                rows.append((name, click.Command(name, help=SUMMARIES[name])))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])

    def get_command(self, ctx, name):
        if name not in self.commands and name in COMMANDS:
            cmd = importlib.import_module(COMMANDS[name]).command
            if cmd.name != name:
                raise RuntimeError(f"{COMMANDS[name]} defines the command {cmd.name!r}, not {name!r}")
            self.add_command(cmd)
        return self.commands.get(name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as err:
            raise _Interrupted() from err
        except TierlabError as err:
            # the one edge where a library parameter (max_batch_tokens) becomes the flag (--max-batch-tokens)
            if err.field and err.file is None:     # a file's field is the file's key, not a flag
                from tierlab.cli.params import flag_of

                err.field = flag_of(err.field, self.commands.get(ctx.invoked_subcommand or ""))
            raise

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _on_sigterm)
        shown = warnings.showwarning
        warnings.showwarning = _show_warning
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as err:
            # A bare group or command: show its help, as click does, but exit 2.
            click.echo(err.ctx.get_help() if err.ctx else str(err), err=True)
            sys.exit(2)
        except click.UsageError as err:
            # click's own usage errors (bad option value, missing argument) become one line too.
            where = f"{err.ctx.command_path}: " if err.ctx is not None else ""
            click.echo(f"tierlab: error: {where}{err.format_message()}", err=True)
            sys.exit(2)
        except click.ClickException as err:
            click.echo(f"tierlab: error: {err.format_message()}", err=True)
            sys.exit(err.exit_code)
        except TierlabError as err:
            click.echo(f"tierlab: error: {err}", err=True)
            sys.exit(2)
        except (KeyboardInterrupt, click.Abort, _Interrupted):
            click.echo("tierlab: interrupted", err=True)
            sys.exit(130)
        except _Terminated:
            click.echo("tierlab: terminated", err=True)
            sys.exit(143)
        except BrokenPipeError:
            # Output piped into `head` and closed early: not an error. Silence the final flush.
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            sys.exit(0)
        finally:
            warnings.showwarning = shown
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        if isinstance(rv, int):
            sys.exit(rv)
        sys.exit(0)


@click.group(cls=TierlabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tierlab")
def main() -> None:
    """tierlab: how many bytes move between which memory tiers per token, and what it costs."""



# Container objects allocated (net) before the cyclic collector's first run; Python's default is 700.
START_GC_THRESHOLD = 250_000


def _collect_late_at_start() -> None:
    """Let the cyclic garbage collector run first after :data:`START_GC_THRESHOLD` allocations, then
    at Python's own thresholds.

    A warm ``tierlab replay`` of a tiny trace allocates ~175,000 container objects, nearly all of them
    kept for the whole process (the modules of numpy, pyarrow and Numba, and Numba's typing and target
    registries loaded at the first cached kernel): at the default threshold the collector ran 247
    times over them for 1,121 objects of garbage, 25 ms of a 0.5 s replay on a quiet host and up to
    60 ms under load (AMD EPYC Zen 4, 2 vCPUs; issue 42).
    The thresholds are restored at the end of the first collection, so a long command runs as
    before after it; only the console script does this (a program importing tierlab keeps its own)."""
    default = gc.get_threshold()
    restored = False

    def restore(phase, info):
        nonlocal restored
        if phase == "stop" and not restored:    # stays registered, idle: removing it here would make
            restored = True                     # gc skip the next callback in its list for this event
            gc.set_threshold(*default)

    gc.callbacks.append(restore)
    gc.set_threshold(START_GC_THRESHOLD, *default[1:])


def script() -> None:
    """The ``tierlab`` console script: :func:`main`, then an exit without the interpreter's teardown.

    Once a command is done, freeing every module's objects one by one (Numba's typing and target
    registries alone are tens of thousands) took 0.12 s of the 0.53 s a replay of a tiny trace took
    from process start. Here the exit handlers still run (:mod:`atexit`: thread pools, Dask, the
    temporary files of :mod:`tempfile`), the standard streams are flushed, and the process ends with
    the command's exit status; every output was written and renamed before the command returned.
    An exception that is a bug propagates as it would without this (a traceback, status 1).

    The cyclic garbage collector first runs later than Python's default (:func:`_collect_late_at_start`)."""
    _collect_late_at_start()
    try:
        main()
        code = 0
    except SystemExit as err:
        code = err.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):    # a closed pipe or stream: nothing more can be said
                pass
        os._exit(code)
