"""The ``simcore`` command line.

Commands (the table :data:`COMMANDS`): ``evaluate`` (the default) prints the best
layouts for a model and workload on a hardware family; ``explore`` runs the co-design
explorer; ``validate`` compares predictions with published measurements; ``tune`` and
``rank`` drive the autotuner. Shared options come from :mod:`simcore.cli.options`, rows
are written by :mod:`simcore.cli.output` (``--format table|json|csv``, ``--out FILE``).

Exit codes of :func:`main`:

* 0 success; 1 the command ran but found nothing (no layout fits, a validation FAIL,
  no successful trial);
* 2 bad input: a :class:`~simcore.errors.SimcoreInputError` or an argparse complaint,
  printed as one line ``simcore <command>: error: ...`` on stderr, no traceback;
* 70 (``EX_SOFTWARE``) any other exception: a bug in simcore, printed with its
  traceback and a last line ``simcore <command>: internal error (a bug, please
  report): <type>: <message>``; never reported as bad input;
* 130 interrupted (Ctrl-C); 141 stdout closed early (``simcore ... | head``).

Nothing here calls ``exit()``; the console script ``simcore = "simcore.cli:main"`` and
``python -m simcore`` turn the return value into the exit status.

Examples
--------
>>> main(["--version"])
simcore 0.1.0
0
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from ..errors import SimcoreInputError
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
    "rank": ("simcore.cli.tune",
             "re-rank an existing DeepSpeed autotuning folder with the correct direction"),
    "app": ("simcore.cli.app", "start the web app (Streamlit; pip install \"simcore[app]\")"),
}
DEFAULT_COMMAND = "evaluate"
_TOP_LEVEL_FLAGS = ("-h", "--help", "--version")


def build_parser() -> Parser:
    """The ``simcore`` parser with every command of :data:`COMMANDS`."""
    from .. import __version__

    parser = Parser(
        prog="simcore",
        description="Vectorized simulation of LLM hardware x parallelism, and a correct "
                    "autotuner. Without a command, runs evaluate.",
    )
    parser.add_argument("--version", action="version", version=f"simcore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (module, help) in COMMANDS.items():
        importlib.import_module(module).add_parser(sub, name, help)
    return parser


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``simcore`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in _TOP_LEVEL_FLAGS):
        argv = [DEFAULT_COMMAND, *argv]
    prog = "simcore"
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if args.command is None:  # pragma: no cover - a command is always given above
            parser.print_help(sys.stderr)
            return 2
        prog = f"simcore {args.command}"
        if extra:  # reported by the command's parser, not the top-level one
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see {prog} --help)",
                             prog=prog)
        return int(args.func(args) or 0)
    except ParserExit as exc:  # --help, --version
        return exc.status
    except UsageError as exc:
        print(f"{exc.prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except SimcoreInputError as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `simcore explore --format csv | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # keep the interpreter's final flush quiet
        os.close(devnull)
        return 141
    except Exception as exc:  # a bug: show it as one, never as bad input
        traceback.print_exc(file=sys.stderr)
        print(f"{prog}: internal error (a bug, please report): {type(exc).__name__}: "
              f"{_one_line(exc)}", file=sys.stderr)
        return 70
