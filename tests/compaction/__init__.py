"""Compaction tests: the pure engine, the manager around it, persistence, races, LLM."""
