"""The `retrieve` tool: passages, dense / BM25 / hybrid indexes and the FAISS index choice."""
