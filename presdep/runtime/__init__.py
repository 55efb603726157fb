"""What every job needs to run: logs, resume folders, hashing, caches, Java, model loading."""
