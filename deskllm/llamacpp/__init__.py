"""The llama.cpp build in use: which one (build), and its native libraries (libraries)."""
