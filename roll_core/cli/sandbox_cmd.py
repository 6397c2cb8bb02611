"""``roll sandbox serve``: roll's sandbox as an HTTP service, for ``rewards.<domain>.code_url``.

Serves :mod:`roll_core.sandbox.service` (the request shape of ROLL's code-sandbox client) with
uvicorn. It binds to 127.0.0.1 unless told otherwise: whoever reaches the port can run code (in the
sandbox). With ``$ROLL_SANDBOX_API_KEY`` set, requests must carry that bearer key. The first line
printed is the URL to put in ``code_url`` (``--port 0`` picks a free port).
"""

from __future__ import annotations

import os
import socket
import sys

#: flag -> Limits field (defaults: roll_core.sandbox.CODE_LIMITS)
LIMIT_FLAGS = {"--wall-s": ("wall_s", float), "--cpu-s": ("cpu_s", int), "--memory-mb": ("memory_mb", int),
               "--processes": ("processes", int), "--output-bytes": ("output_bytes", int)}


def register(subparsers) -> None:
    parser = subparsers.add_parser("sandbox", help="roll's code sandbox as a service (code_url)")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    serve = sub.add_parser(
        "serve", help="serve roll's sandbox over HTTP at /run_code (ROLL's code_url request shape)",
        description="Run untrusted code sent by code-sandbox rewards (rewards.<domain>.code_url with "
        "use_local: false) in roll's sandbox. Prints the code_url first. Set ROLL_SANDBOX_API_KEY to require "
        "a bearer key (clients: ROLL_CODE_SANDBOX_API_KEY).")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default: 8080; 0 picks a free one)")
    serve.add_argument("--max-concurrency", type=int, default=os.cpu_count() or 1,
                       help="programs run at once; others wait (default: the CPU count)")
    for flag, (name, kind) in LIMIT_FLAGS.items():
        serve.add_argument(flag, dest=name, type=kind, default=None,
                           help=f"per-run limit {name} (default: roll's code-reward limit)")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    import uvicorn

    from roll_core.sandbox import CODE_LIMITS, check_available
    from roll_core.sandbox.service import RUN_PATH, SERVER_KEY_ENV, create_app

    mode = check_available()  # refuse now, naming the fix, rather than fail every request
    limits = CODE_LIMITS.with_(**{name: getattr(args, name) for name, _ in LIMIT_FLAGS.values()
                                  if getattr(args, name) is not None})
    app = create_app(limits, api_key=os.environ.get(SERVER_KEY_ENV) or None, max_concurrency=args.max_concurrency)
    sock = socket.create_server((args.host, args.port))
    host, port = sock.getsockname()[:2]
    print(f"http://{host}:{port}{RUN_PATH}", flush=True)
    print(f"roll sandbox: mode {mode}, limits {limits}, {args.max_concurrency} at once"
          f"{', bearer key required' if os.environ.get(SERVER_KEY_ENV) else ''}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])
    return 0
