"""Retsu's benchmark: Retsu over HTTP vs a raw-SQL floor vs PgQueuer, one run, one table.

Run ``python -m bench --help``; docs/performance.md describes the scenarios and holds
the latest results.
"""
