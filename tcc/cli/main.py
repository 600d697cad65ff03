"""The `tcc` command: a click group; each subcommand lives in its own module."""

from __future__ import annotations

import errno
import importlib
import sys

import click
from rich.console import Console
from rich.markup import escape

from tcc import __version__
from tcc.cli.entry import interrupted
from tcc.errors import InternalError, TccError

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class TccGroup(click.Group):
    """Turns tcc errors into one red line and an exit code instead of a traceback, and imports
    a command's module only when that command is looked up."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx, name):
        if name in _COMMANDS and name not in self.commands:
            module, attr = _COMMANDS[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TccError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            err_console.print(f"[bold red]error:[/] {_one_line(e)}", markup=True)
            sys.exit(EXIT_USER_ERROR)
        except MemoryError:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            err_console.print(
                "[bold red]error:[/] out of memory; use smaller inputs (e.g. a smaller --shape)"
            )
            sys.exit(EXIT_USER_ERROR)
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)
        except (click.exceptions.Exit, click.exceptions.ClickException, SystemExit):
            raise
        except Exception as e:  # InternalError and anything unexpected: a tcc bug
            if interrupted():  # a Ctrl-C an extension module turned into another error
                err_console.print("interrupted")
                sys.exit(130)
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):  # never a bug
                where = f"{e.filename}: " if e.filename else ""
                err_console.print(f"[bold red]error:[/] {escape(where)}no space left on device; free "
                                  "some space (temporary files go to TMPDIR, else /tmp)")
                sys.exit(EXIT_USER_ERROR)
            kind = "" if isinstance(e, InternalError) else f"{type(e).__name__}: "
            err_console.print(
                f"[bold red]internal error:[/] {kind}{_one_line(e)} "
                "(a tcc bug; rerun with --debug for the traceback and please report it)"
            )
            sys.exit(EXIT_INTERNAL_ERROR)


def _one_line(e: BaseException) -> str:
    """The message on one line, escaped: a message is text, never rich markup ("tcc[sign]")."""
    return escape(" ".join(str(e).split("\n")).strip() or type(e).__name__)


@click.group(cls=TccGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tcc")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.pass_context
def cli(ctx, debug):
    """tcc: a tensor compiler toolchain.

    Import an ONNX model into tcc's IR, inspect it, optimize it, run it with the
    reference interpreter, or compile it into a .tvmpack and run that. Exit codes:
    0 ok, 1 a check failed, 2 bad input, 3 internal error.
    """
    ctx.obj = {"debug": debug}


# Each command's module is imported when the command runs (or `--help` lists it): most
# commands need a small part of tcc, and importing all of it took 0.4 s of every command.
_COMMANDS = {
    "import": ("tcc.cli.import_cmd", "command"),
    "optimize": ("tcc.cli.optimize_cmd", "command"),
    "show": ("tcc.cli.show_cmd", "command"),
    "run": ("tcc.cli.run_cmd", "command"),
    "check": ("tcc.cli.check_cmd", "command"),
    "tune": ("tcc.cli.tune_cmd", "command"),
    "db": ("tcc.cli.db_cmd", "command"),
    "compile": ("tcc.cli.compile_cmd", "compile_command"),
    "emit": ("tcc.cli.compile_cmd", "emit_command"),
}


def main(argv=None):
    """Console-script entry point; usage errors are one line too."""
    try:
        return cli.main(args=argv, prog_name="tcc", standalone_mode=False)
    except click.exceptions.UsageError as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        err_console.print(f"[bold red]error:[/] {_one_line(e.format_message())}{escape(hint)}")
        sys.exit(EXIT_USER_ERROR)
    except click.exceptions.ClickException as e:
        err_console.print(f"[bold red]error:[/] {_one_line(e.format_message())}")
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        err_console.print("interrupted")
        sys.exit(130)
