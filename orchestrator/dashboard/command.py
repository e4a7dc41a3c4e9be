"""`gpuctl dashboard`: serve the read-only web dashboard (needs the ``dashboard`` extra).

Loopback (127.0.0.1) by default, where only ``Host`` names of loopback are served. Bound to any other
address it needs a token: ``--token``, ``$GPUCTL_DASHBOARD_TOKEN``, or one generated and printed in
the address to open. The web stack is imported only when the command runs, so the base install lists
the command and, run without the extra, says in one line what to install.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from orchestrator import extras
from orchestrator.backends.slurm import load_cluster_config
from orchestrator.backends.slurm.config import CONFIG_ENV as SLURM_CONFIG_ENV
from orchestrator.errors import UserError
from orchestrator.home import home_dir

TOKEN_ENV = "GPUCTL_DASHBOARD_TOKEN"
WEB_STACK = ("starlette", "jinja2", "uvicorn")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dashboard", help="a read-only web dashboard of jobs, costs and budgets (loopback by default)"
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs a token)")  # fmt: skip
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--backend", default="local", choices=["local", "slurm"],
                   help="the controller this home serves; every job of $GPUCTL_HOME's store is shown, local "
                        "and SLURM (slurm: SLURM jobs' logs are found through --cluster-config)")  # fmt: skip
    p.add_argument("--cluster-config", metavar="FILE",
                   help=f"SLURM cluster config (default ${SLURM_CONFIG_ENV} or $GPUCTL_HOME/slurm.yaml)")  # fmt: skip
    p.add_argument("--token", help=f"the token every request must carry (default ${TOKEN_ENV}; generated and "
                                   "printed when listening beyond loopback)")  # fmt: skip
    p.add_argument("--poll-seconds", type=float, default=3.0, help="how often pages refresh (default 3)")
    p.set_defaults(run=run_dashboard)


def _token(args: argparse.Namespace, needed: bool) -> str | None:
    from orchestrator.dashboard.access import MIN_TOKEN_CHARS, new_token

    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"the dashboard token has {len(token)} characters, fewer than {MIN_TOKEN_CHARS}",
                        "give a longer --token, or leave it out to have one generated")  # fmt: skip
    return token if token is not None or not needed else new_token()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host} port {port}: {exc.strerror}",
                        "choose another --port (0 picks a free one) or --host") from exc  # fmt: skip
    sock.listen(128)
    return sock


def run_dashboard(args: argparse.Namespace) -> int:
    for module in WEB_STACK:
        extras.check(module, "gpuctl dashboard")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port", "give 0 to 65535 (0 picks a free one)")
    if args.poll_seconds < 0.5:
        raise UserError(f"--poll-seconds {args.poll_seconds} is too often", "give 0.5 or more")
    if args.cluster_config:
        os.environ[SLURM_CONFIG_ENV] = os.path.abspath(args.cluster_config)
    if args.backend == "slurm":
        load_cluster_config()  # a missing or wrong cluster config is said now, not on each job page
    import uvicorn

    from orchestrator.dashboard.access import LOOPBACK_NAMES, needs_token
    from orchestrator.dashboard.app import create_app

    needed = needs_token(args.host)
    token = _token(args, needed)
    home = home_dir()
    allowed = None if needed else {*LOOPBACK_NAMES, args.host.strip("[]")}
    app = create_app(home, token=token, allowed_hosts=allowed, poll_seconds=args.poll_seconds)
    sock = _listen(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host.strip('[]')}]" if ":" in args.host else args.host
    address = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(f"gpuctl dashboard of {home} on {address}", flush=True)
    print("read-only; Ctrl-C stops it", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down on Ctrl-C, then raises it again: the normal way to stop
        pass
    finally:
        sock.close()
    print("gpuctl dashboard stopped", flush=True)
    return 0
