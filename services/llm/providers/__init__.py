"""LLM providers behind one protocol: OpenAI (and OpenAI-compatible local servers), Anthropic, and
the offline extractive provider."""
