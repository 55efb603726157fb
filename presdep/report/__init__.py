"""Table 1, Figure 1, the bootstrap stability analysis and its reports."""
