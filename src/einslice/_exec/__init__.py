"""JAX execution of plans: semirings, pairwise steps, chunk scans, derivatives."""
