"""Tools for the chat: MCP servers (their configuration, their processes and connections), the
user's consent, and the loop that lets a model call them and read the results."""
