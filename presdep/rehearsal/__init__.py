"""A rehearsal of the paper matrix on loopback sources: tiny models, original-format files, local servers."""
