"""Model files: GGUF header reading, quantization names (and, later, the Hugging Face catalog)."""
