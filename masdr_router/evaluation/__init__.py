"""Offline evaluation of retrieval (and, later, of routers)."""
