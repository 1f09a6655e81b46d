"""Stand-in package (tests/standins/vllm034/README.md)."""
