"""The GGUF file format: a bounded, validating header reader used by every layer that looks
inside a model file (the engine before llama.cpp sees it, the planner, the catalog, the store)."""
