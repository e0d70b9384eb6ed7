"""Message storage for streams: one interface (base.py), a memory store and a crash-safe file store."""
