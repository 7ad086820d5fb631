"""What both command lines share: connection options, the raw-answer recorder, errors."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

import httpx

from retsu_client.errors import APIError, RetsuError

CONNECTION_HELP = (
    "--url defaults to $RETSU_URL, else http://127.0.0.1:2424; --token to $RETSU_TOKEN."
)


def connection_options(*, suppress: bool) -> argparse.ArgumentParser:
    """--url / --token (and --timeout); ``suppress`` lets them appear at any level."""
    default = argparse.SUPPRESS if suppress else None
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("connection")
    group.add_argument("--url", default=default, help="Retsu API base URL ($RETSU_URL)")
    group.add_argument("--token", default=default, help="bearer token ($RETSU_TOKEN)")
    group.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS if suppress else 10.0,
        help="seconds per request (default 10)",
    )
    return parser


class Recorder(httpx.BaseTransport):
    """Keeps the last answer's body, so ``--json`` prints exactly what the API sent."""

    def __init__(self, inner: httpx.BaseTransport | None = None) -> None:
        self.inner = inner if inner is not None else httpx.HTTPTransport()
        self.last: httpx.Response | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        self.last = response
        return response

    def close(self) -> None:
        self.inner.close()


def print_error(error: RetsuError, *, as_json: bool, err: TextIO = sys.stderr) -> None:
    """An API error's problem (JSON with --json), or why there was no answer."""
    if isinstance(error, APIError):
        if as_json:
            import msgspec

            print(msgspec.json.encode(error.problem).decode(), file=err)
            return
        where = f" [request id {error.request_id}]" if error.request_id else ""
        print(f"error: {error.code} ({error.status}): {error.detail}{where}", file=err)
        return
    print(f"error: {error}", file=err)
