"""MCP: the typed actions as MCP tools, over Streamable HTTP, per conversation (docs/mcp.md)."""
