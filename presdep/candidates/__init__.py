"""First stage and fixtures: BM25 over a Lucene index, candidates and qrels per dataset."""
