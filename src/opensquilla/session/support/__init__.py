"""Small pure helpers: clocks and ids, the time prefix, strict JSON text."""
