"""Command lines: ``retsuctl`` (operator CLI over HTTP) and ``retsu-worker`` (run a handler)."""
