"""Local mode: the embedded runtime and its web chat page. Not deployed."""
