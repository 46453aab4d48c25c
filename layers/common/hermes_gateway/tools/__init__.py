"""The agent's built-in tools: the port (`base`), the registry (`registry`) and one module per tool."""
