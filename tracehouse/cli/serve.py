"""``tracehouse serve``: argument parsing over :func:`tracehouse.serve.server.serve`."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

from tracehouse.cli.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE, warehouse_parent

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``tracehouse serve`` on the main parser's subcommands."""
    from tracehouse.serve import DEFAULT_HOST, DEFAULT_PORT

    parser = sub.add_parser(
        "serve",
        parents=[warehouse_parent()],
        help="interactive viewer over the marts in a web browser (local, read-only, offline)",
        description=(
            "Serve a web page over the warehouse's marts: each run's headline (the report's "
            "numbers), its iterations side by side, a rank x iteration heatmap of the step "
            "or any of its parts, and a click down to a rank's iteration and its kernels. "
            "Reads the published database read-only, like `tracehouse sql`: a build beside "
            "it is not blocked, and the next click after it shows the new marts. Loads "
            "nothing from the internet. Ctrl-C stops it."),
    )
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine "
                             "only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P",
                        help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.set_defaults(handler=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    import duckdb

    from tracehouse.core.warehouse import resolve_warehouse
    from tracehouse.serve.marts import WarehouseNotReady
    from tracehouse.serve.server import serve

    if not 0 <= args.port <= 65535:
        print(f"error: --port {args.port} is not a port (0 to 65535)", file=sys.stderr)
        return EXIT_USAGE
    try:
        serve(resolve_warehouse(args.warehouse), host=args.host, port=args.port)
    except WarehouseNotReady as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except duckdb.Error as exc:
        print(f"error: cannot open the warehouse database: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; "
              "choose another --port (0 picks a free one)", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
