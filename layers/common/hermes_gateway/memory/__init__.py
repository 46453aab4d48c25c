"""Agent memory: the manager, its providers (built-in notes, Honcho) and the memory-only flush turn."""
