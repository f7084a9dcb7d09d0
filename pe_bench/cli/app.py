"""The `pe-bench` application: the command table, one-line errors and exit codes for every command, and the console
helpers the commands print with. Only light modules at import time: help, `schemes`, `--version`, `--cfg` and
configuration errors answer without importing torch (scripts/bench_cli_startup.py measures it); each command imports
what it needs."""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

try:  # recent typer carries its own copy of click, whose exceptions its commands raise
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors

from pe_bench import __version__
from pe_bench.config import GROUPS, ConfigError, preset_names

# Off a terminal (logs, CI) rich would assume 80 columns and truncate numbers; tables are never cut.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str) -> None:
    """Print plain text: nothing in it is read as rich markup (``pip install 'pe-bench[plots]'`` stays whole)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """Plain text on stderr (never markup)."""
    err.print(text, markup=False)


def error(text: str) -> None:
    """``error: <text>`` on stderr, the text never read as markup."""
    err.print(f"[bold red]error:[/] {escape(text)}")


def presets_help() -> str:
    """The config groups and their presets, the sweeps and the schemes, read from configs/ (no imports)."""
    lines = [f"{g + '=':<8} {', '.join(preset_names(g))}" for g in GROUPS]
    lines.append(f"{'sweep=':<8} {', '.join(preset_names('sweep'))}   (pe-bench sweep)")
    return ("\b\nConfig groups and their presets (configs/<group>/<preset>.yaml; `pe-bench schemes` describes the "
            "schemes):\n" + "\n".join(lines) + "\nAny key can be set too: model.n_layers=2 train.seq_len=128 "
            "eval.lengths=[64,1024]; `--cfg` prints the result.")


class OneLineErrors(TyperGroup):
    """Click's usage errors (an unknown option or command, a bad option value, a missing argument) as one
    ``error: ...`` line and exit 2, like every other bad input; ``pe-bench`` alone still shows the help."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        argv = list(kwargs.get("args") or (args[0] if args else None) or sys.argv[1:])
        if any(a in ("-m", "--multirun") for a in argv):
            error("-m/--multirun is Hydra's sweep switch; pe-bench sweeps with `pe-bench sweep KEY=a,b ...` (every "
                  "comma list an axis; `pe-bench sweep --help`)")
            sys.exit(2)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # typer.Exit(n) comes back as n
        except click_errors.NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except click_errors.UsageError as e:
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            error(" ".join(e.format_message().split()) + hint)
            sys.exit(2)
        except click_errors.ClickException as e:
            error(" ".join(e.format_message().split()))
            sys.exit(e.exit_code)
        except typer.Abort:  # typer's own class (its copy of click has none in click_errors)
            warn("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Train small transformers at length L with a positional scheme; evaluate at L, 2L, 4L, 8L.",
                  epilog=presets_help())


def verbose_option() -> Any:
    return typer.Option(False, "--verbose", help="A line per evaluated length and mode also off a terminal (a log "
                        "file gets one summary line per scheme variant and mode).")


def set_verbose(verbose: bool) -> None:
    """--verbose: for this process and every run it starts (a sweep's, a Slurm array's)."""
    if verbose:
        os.environ["PE_BENCH_VERBOSE"] = "1"


OVERRIDES_HELP = "Hydra overrides, e.g. scheme=rope model.n_layers=2 train=smoke eval.lengths=[64,128]"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pe-bench {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                              help="Print pe-bench's version and exit."),
                 path: list[Path] | None = typer.Option(None, "--path", metavar="DIR",
                                                        help="A directory of your own schemes/, tasks/ and configs/ "
                                                        "(repeatable; joins PE_BENCH_PATH; docs/adding-a-scheme.md).")
                 ) -> None:
    """Train small transformers at length L with a positional scheme; evaluate at L, 2L, 4L, 8L."""
    from pe_bench import plugins

    try:  # --path was applied when pe_bench.cli was imported (before the registries are read); checked here
        plugins.check_path()
    except ConfigError as e:
        error(f"{e} (--path or PE_BENCH_PATH)")
        raise typer.Exit(2) from None


def command_line(ctx: typer.Context, leave_out: tuple[str, ...] = ("out",)) -> str:
    """The command being run as one would type it again: its arguments, and its options that differ from their
    defaults but ``leave_out`` (by parameter name)."""
    import shlex

    from pe_bench.plugins import search_dirs

    words = ["pe-bench", *(w for d in search_dirs() for w in ("--path", str(d))), ctx.info_name or ""]
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if p.param_type_name == "argument":
            words += [str(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]
        elif p.name not in leave_out and value not in (None, (), []) and value != p.default:
            if getattr(p, "is_flag", False):
                words.append(p.opts[0] if value else p.secondary_opts[0])
            elif getattr(p, "multiple", False):
                words += [w for v in value for w in (p.opts[0], str(v))]
            else:
                words += [p.opts[0], *(map(str, value) if isinstance(value, (list, tuple)) else [str(value)])]
    return shlex.join(words)


def _raised(e: BaseException, module: str, name: str) -> bool:
    """isinstance(e, module.name) without importing the module: an exception of a class from a module that was
    never imported cannot have been raised."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(e, getattr(mod, name))


TRAINS = "run the same command again to resume from the last checkpoint"
INTERRUPTED = {"train": TRAINS, "finetune": TRAINS, "sweep": TRAINS,  # what to do after Ctrl-C, by command
               "report": "the report directory is as it was; run the same command again"}


def friendly(fn: Callable) -> Callable:
    """Bad input → one line and exit 2; a crash → one line and exit 1 (PE_BENCH_DEBUG=1 shows the traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            warn(f"interrupted: {INTERRUPTED.get(fn.__name__, 'run the same command again')}")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # the reader of the output went away (`| head`): nothing more to say to anyone
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except Exception as e:
            if isinstance(e, ConfigError) or _raised(e, "pe_bench.data", "DataError"):
                error(str(e))
                raise typer.Exit(2) from None
            if _raised(e, "pe_bench.runs", "RunBusy"):
                error(f"{e}: let it finish, or stop that process first")
                raise typer.Exit(4) from None
            if _raised(e, "pe_bench.distributed", "StopRequested"):
                warn(f"{e} (on a signal); run the same command again to resume")
                raise typer.Exit(3) from None
            if _raised(e, "pe_bench.train", "Diverged"):
                error(str(e))
                raise typer.Exit(1) from None
            if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                where = f" writing {e.filename}" if e.filename else ""
                error(f"No space left on device{where}: free some space and run the same command again (pe-bench "
                      "replaces its files whole: what was there before is intact, a run resumes from its checkpoint)")
                raise typer.Exit(1) from None
            if os.environ.get("PE_BENCH_DEBUG"):
                raise
            error(f"{type(e).__name__}: {e} (PE_BENCH_DEBUG=1 shows the traceback)")
            raise typer.Exit(1) from None

    return wrapper
