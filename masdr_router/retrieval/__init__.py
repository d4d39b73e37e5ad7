"""Scoped retrieval: encoder, dense (FAISS / torch) and BM25 shards, fusion, the scoped index."""
