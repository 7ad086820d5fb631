"""HTTP adapter: the Litestar app, msgspec DTOs, problem+json, request ids."""

from retsu.adapters.http.app import create_app

__all__ = ["create_app"]
