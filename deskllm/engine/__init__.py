"""The engine: a llama.cpp worker process, its client, and the Reply a chat returns."""
