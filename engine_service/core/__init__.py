"""The engine's core: sessions, the chat loop, events. No transport is imported here."""
