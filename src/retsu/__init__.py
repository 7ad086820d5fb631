"""Retsu: an observable, distributed priority queue served over HTTP."""

__version__ = "0.1.0"
