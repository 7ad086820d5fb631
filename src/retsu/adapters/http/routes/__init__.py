"""Route handlers, one module per resource; each exposes a factory taking ``ApiServices``."""
