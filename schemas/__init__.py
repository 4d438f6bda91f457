"""Data contracts shared by every stage: tool documents, agent answers, TDI pairs, tool sets."""
