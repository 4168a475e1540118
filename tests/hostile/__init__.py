"""Hostile and careless input through the public API and the CLI, on both backends
(project issue 11): nothing lost, nothing leaked, one clear error."""
