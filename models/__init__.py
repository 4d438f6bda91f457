"""Model code: the dependency discriminator, the sentence encoder, the embedded LLM server."""
