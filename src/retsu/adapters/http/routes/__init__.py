"""Route handlers, one module per resource.

A handler declares everything it takes: typed path, query and header parameters
(``params.py``), a ``data`` body Struct (``dto.py``), and its use cases by their
``UseCaseContainer`` provider names (injected by Litestar, see ``app.py``). The errors a
route can answer besides the structural ones are listed in ``errors=`` (``openapi.py``).
"""
