"""The ``simcore`` command line.

Commands (the table :data:`COMMANDS`): ``evaluate`` (the default) prints the best
layouts for a model and workload on a hardware family; ``explore`` runs the co-design
explorer; ``validate`` compares predictions with published measurements; ``tune`` and
``rank`` drive the autotuner; ``models`` and ``families`` list what ``--model`` and
``--family`` accept. Shared options come from :mod:`simcore.cli.options`, rows
are written by :mod:`simcore.cli.output` (``--format table|json|csv``, ``--out FILE``).

Exit codes of :func:`main`:

* 0 success; 1 the command ran and its result is "nothing" (no layout fits, a
  validation FAIL, no successful trial): a result, not bad input, so rows (possibly
  empty) are still written;
* 2 bad input: a :class:`~simcore.errors.SimcoreInputError` or an argparse complaint,
  printed as one line ``simcore <command>: error: ...`` on stderr, no traceback;
* 70 (``EX_SOFTWARE``) any other exception: a bug in simcore, printed with its
  traceback and a last line ``simcore <command>: internal error (a bug, please
  report): <type>: <message>``; never reported as bad input;
* 75 (``EX_TEMPFAIL``) stopped by the environment, not the input: the ``--resume``
  store is in use by another run, every dask worker was lost, the disk filled up
  mid-sweep; one line saying how many chunks are saved and how to resume (a
  :class:`~simcore.errors.SimcoreRetryError`);
* 130 interrupted (Ctrl-C): ``interrupted; N of M chunks saved in STORE, rerun to
  resume`` (or ``interrupted``), no traceback; 141 stdout closed early
  (``simcore ... | head``).

Nothing here calls ``exit()``; the console script ``simcore = "simcore.cli:main"`` and
``python -m simcore`` turn the return value into the exit status.

Examples
--------
>>> main(["--version"])
simcore 0.1.0
0
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from ..errors import SimcoreInputError, SimcoreRetryError
from .options import Parser, ParserExit, UsageError

__all__ = ["COMMANDS", "build_parser", "main"]

#: name -> (module, help). Each module has ``add_parser(sub, name, help)``, which
#: registers the command with ``func`` set to its handler (namespace -> exit code).
COMMANDS: dict[str, tuple[str, str]] = {
    "evaluate": ("simcore.cli.evaluate",
                 "best parallel layouts for a model on a hardware family (the default)"),
    "explore": ("simcore.cli.explore",
                "co-design: sweep hardware candidates, best layout per candidate"),
    "validate": ("simcore.cli.validate", "compare predictions with published measurements"),
    "tune": ("simcore.cli.tune",
             "simulate DeepSpeed autotuning (ZeRO stage x micro-batch) without GPUs"),
    "compare": ("simcore.cli.compare", "compare hardware designs over batch and context"),
    "rank": ("simcore.cli.tune",
             "re-rank an existing DeepSpeed autotuning folder with the correct direction"),
    "serving": ("simcore.cli.serving",
                "serving planner: best deployment on a GPU budget under TTFT/TPOT limits"),
    "models": ("simcore.cli.models",
               "list the model presets and the catalogue with their shapes"),
    "families": ("simcore.cli.families",
                 "list the hardware families side by side; --provenance FAMILY: each value's "
                 "source"),
    "app": ("simcore.cli.app", "start the web app (Streamlit; pip install \"simcore[app]\")"),
}
DEFAULT_COMMAND = "evaluate"
#: commands that run the kernels (and so may compile them on a fresh install) -> how long
#: that one-time compile took on a 2-core machine, in seconds (the notice's ~N)
_COMPUTING: dict[str, int] = {"evaluate": 3, "explore": 15, "validate": 20, "tune": 8,
                              "serving": 15, "compare": 15}
_TOP_LEVEL_FLAGS = ("-h", "--help", "--version")


#: The exit codes, shown in ``simcore --help`` (the module docstring has the details).
EXIT_CODES = """exit codes:
  0    success
  1    the command ran and found nothing (no layout fits, validation FAIL): a result
  2    bad input (one line on stderr: what was passed and what to pass instead)
  70   internal error: a bug in simcore (traceback, please report)
  75   stopped by the environment (store in use, dask workers lost, disk full):
       rerun the same command to resume
  130  interrupted (Ctrl-C); finished chunks of a --resume store are kept
  141  stdout closed early (e.g. | head)"""


def _interrupted(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt behind ``exc`` (see :func:`simcore.errors.interrupt_behind`)."""
    from ..errors import interrupt_behind

    return interrupt_behind(exc)


def build_parser(command: str | None = None) -> Parser:
    """The ``simcore`` parser with every command of :data:`COMMANDS`, or only with
    ``command`` (what :func:`main` does once it knows the command: the other command
    modules, and what they import, are not loaded)."""
    from .. import __version__

    parser = Parser(
        prog="simcore",
        description="Vectorized simulation of LLM hardware x parallelism, and a correct "
                    "autotuner. Without a command, runs evaluate.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"simcore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (module, help) in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(module).add_parser(sub, name, help)
    return parser


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simcore`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    if argv is not None:
        return _main(list(argv))
    try:  # the process's own command line: the interpreter exits next
        return _main(sys.argv[1:])
    finally:
        # its last garbage collections then skip what is left (numba's typing and
        # lowering registries: ~0.2 s of a 0.8 s `simcore evaluate`); every file simcore
        # writes is closed explicitly, and the memory goes back with the process
        gc.freeze()


def _main(argv: list[str]) -> int:
    if argv == ["--version"]:  # answered before any command module (xarray, numba) loads
        from .. import __version__

        print(f"simcore {__version__}")
        return 0
    if not argv or (argv[0].startswith("-") and argv[0] not in _TOP_LEVEL_FLAGS):
        argv = [DEFAULT_COMMAND, *argv]
    prog = "simcore"
    try:
        parser = build_parser(argv[0] if argv[0] in COMMANDS else None)
        args, extra = parser.parse_known_args(argv)
        if args.command is None:  # pragma: no cover - a command is always given above
            parser.print_help(sys.stderr)
            return 2
        prog = f"simcore {args.command}"
        if extra:  # reported by the command's parser, not the top-level one
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see {prog} --help)",
                             prog=prog)
        args.argv = argv  # the command line, for "rerun ... to resume" messages
        if args.command in _COMPUTING:
            from ..engine.core import FIRST_CALL_KERNELS, notice_before_compiling

            at_rate = getattr(args, "rate", None) is not None or getattr(args, "trace", None)
            key = "serving_rate" if args.command == "serving" and at_rate else args.command
            first = FIRST_CALL_KERNELS.get(key) or FIRST_CALL_KERNELS[
                "train" if getattr(args, "mode", "") == "train" else "inference"]
            seconds = _COMPUTING[args.command]
            notice_before_compiling(first, lambda: print(
                f"simcore: compiling kernels (once, ~{seconds} s)", file=sys.stderr,
                flush=True))
        return int(args.func(args) or 0)
    except ParserExit as exc:  # --help, --version
        return exc.status
    except UsageError as exc:
        print(f"{exc.prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except SimcoreInputError as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except SimcoreRetryError as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 75
    except KeyboardInterrupt as exc:
        print(f"{prog}: {_one_line(exc) or 'interrupted'}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `simcore explore --format csv | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # keep the interpreter's final flush quiet
        os.close(devnull)
        return 141
    except Exception as exc:  # a bug: show it as one, never as bad input
        ki = _interrupted(exc)
        if ki is not None:  # Ctrl-C that surfaced as another exception
            print(f"{prog}: {_one_line(ki) or 'interrupted'}", file=sys.stderr)
            return 130
        traceback.print_exc(file=sys.stderr)
        print(f"{prog}: internal error (a bug, please report): {type(exc).__name__}: "
              f"{_one_line(exc)}", file=sys.stderr)
        return 70
    finally:
        if "simcore.kernels._numba" in sys.modules:  # a notice this command never needed
            sys.modules["simcore.kernels._numba"]._BEFORE_FIRST_CALL.clear()
