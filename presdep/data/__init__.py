"""Loaders for the real formats users have (TREC, rank_llm JSON, BEIR) and the synthetic generator."""
