"""Remote A2A agents as tools: one source per configured agent (``tool``), and the set of
sources the engine holds (``sources``). The A2A SDK is imported here only."""
