"""Stand-in (tests only), not SGLang."""
