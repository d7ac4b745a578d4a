"""Pure-Python planning: parse an equation, pick a path and slices. No JAX here."""
