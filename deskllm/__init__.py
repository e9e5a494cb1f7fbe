"""deskllm: run large language models on your own computer."""

__version__ = "0.1.0"
