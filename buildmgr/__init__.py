"""Build llama.cpp for combinations of ggml backends into versioned, proven prefixes."""

__version__ = "0.1.0"
