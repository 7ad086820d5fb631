"""The memory twin of every storage port (SPEC §8): one mixin module per port over
``tables.py``, served by ``storage.MemoryStorage``; held to the same contract suite as the
PostgreSQL adapter (``tests/contract``)."""
