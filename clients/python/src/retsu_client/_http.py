"""What both clients share around httpx: settings, building a request, reading an error."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping

import httpx

from retsu_client._calls import Call
from retsu_client._version import __version__
from retsu_client.errors import APIError, error_for_code, problem_error
from retsu_client.retry import parse_retry_after

DEFAULT_URL = "http://127.0.0.1:2424"
DEFAULT_TIMEOUT = 10.0
# Below uvicorn's 5 s keep-alive, so the client drops an idle connection before the
# server does (a request on a connection the server just closed fails for nothing).
KEEPALIVE_EXPIRY = 4.0
REQUEST_ID_HEADER = "x-request-id"

log = logging.getLogger("retsu_client")


def env_url(base_url: str | None) -> str:
    return base_url or os.environ.get("RETSU_URL") or DEFAULT_URL


def env_token(token: str | None) -> str | None:
    return token if token is not None else (os.environ.get("RETSU_TOKEN") or None)


def default_headers(token: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    result = {"user-agent": f"retsu-client/{__version__}", "accept": "application/json"}
    if token:
        result["authorization"] = f"Bearer {token}"
    if headers:
        result.update(headers)
    return result


def as_timeout(timeout: float | httpx.Timeout) -> httpx.Timeout:
    return timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)


def limits() -> httpx.Limits:
    return httpx.Limits(max_connections=100, keepalive_expiry=KEEPALIVE_EXPIRY)


def new_request_id() -> str:
    return uuid.uuid4().hex


def build_request(
    http: httpx.Client | httpx.AsyncClient, call: Call, request_id: str, timeout: httpx.Timeout
) -> httpx.Request:
    headers = {REQUEST_ID_HEADER: request_id}
    if call.body is not None:
        headers["content-type"] = "application/json"
    if call.headers:
        headers.update(call.headers)
    if call.wait:
        # A long poll is answered after up to `wait` seconds: the read timeout covers that.
        read = None if timeout.read is None else timeout.read + call.wait
        timeout = httpx.Timeout(
            connect=timeout.connect, read=read, write=timeout.write, pool=timeout.pool
        )
    return http.build_request(
        call.method,
        call.path,
        params=call.params,
        content=call.body,
        headers=headers,
        timeout=timeout,
    )


def response_error(response: httpx.Response, request_id: str) -> APIError:
    """The exception for an error answer (a problem document, or any other body)."""
    rid = response.headers.get(REQUEST_ID_HEADER) or request_id
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    error = problem_error(
        response.status_code, response.content, request_id=rid, retry_after=retry_after
    )
    if error is not None:
        return error
    status = response.status_code
    cls = error_for_code("", status)
    reason = response.reason_phrase or "error"
    return cls(
        f"HTTP {status} {reason} (the answer is not a Retsu problem document)",
        code=f"http_{status}",
        status=status,
        request_id=rid,
        title=reason,
        retry_after=retry_after,
    )


def describe(call: Call) -> str:
    return f"{call.method} {call.path}"
