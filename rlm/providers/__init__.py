"""LLM providers: the OpenAI-compatible HTTP client and the built-in fixture model."""
