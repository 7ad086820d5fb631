"""The shared (Redis-compatible) cache of queue details (SPEC §4)."""
