"""``simcore app``: start the Streamlit app (:mod:`simcore.app.main`).

Runs ``streamlit run <simcore/app/main.py> --server.port PORT --server.address HOST
--server.headless true --browser.gatherUsageStats false --client.toolbarMode minimal``
and prints the URL. A port in use, or streamlit not installed, is bad input (exit 2,
one line).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import SimcoreInputError

__all__ = ["add_parser", "run", "streamlit_command", "port_free"]

MAIN = Path(__file__).resolve().parent.parent / "app" / "main.py"


def add_parser(sub: Any, name: str, help: str) -> None:
    p = sub.add_parser(name, help=help,
                       description="Start the simcore web app (Streamlit): Explore, Serving, "
                                   "Compare, Autotune and Validation pages. Needs "
                                   'pip install "simcore[app]".')
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.set_defaults(func=run)


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def streamlit_command(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(MAIN),
            "--server.port", str(port), "--server.address", host,
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--client.toolbarMode", "minimal"]


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("streamlit") is None:
        raise SimcoreInputError('streamlit is not installed; pip install "simcore[app]"')
    if not 0 < args.port < 65536:
        raise SimcoreInputError(f"--port {args.port} is not a port; pass 1..65535")
    if not port_free(args.host, args.port):
        raise SimcoreInputError(f"port {args.port} is in use; pass --port {args.port + 1}")
    print(f"simcore app: http://{args.host}:{args.port}", flush=True)
    env = dict(os.environ, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    proc = subprocess.Popen(streamlit_command(args.host, args.port), env=env)
    # a SIGTERM to `simcore app` stops the server too (no orphaned streamlit process)
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
