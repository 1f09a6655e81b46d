"""sactool: CXL memory toolkit for serving sparse-attention LLMs (SAC-style KV pools)."""

__version__ = "0.1.0"
