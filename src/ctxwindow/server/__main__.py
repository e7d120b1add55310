"""``python -m ctxwindow.server``: the same flags as ``ctxwindow serve``."""

from __future__ import annotations

import argparse

from ctxwindow.server.main import STARTUP_ERRORS, refuse, serve_command


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ctxwindow.server")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--store")
    parser.add_argument("--upstream")
    parser.add_argument("--config")
    parser.add_argument("--workers", type=int)
    args = parser.parse_args(argv)
    try:
        serve_command(args.host, args.port, args.store, args.upstream, args.config, args.workers)
    except STARTUP_ERRORS as exc:
        refuse(exc)


if __name__ == "__main__":
    main()
