"""HTTP adapter: the Litestar app, msgspec DTOs, problem+json, request ids."""

from retsu.adapters.http.app import create_app
from retsu.adapters.http.services import ApiServices

__all__ = ["ApiServices", "create_app"]
