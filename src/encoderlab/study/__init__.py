"""Studies: a grid of pretraining runs and their evaluation, planned with shared trunks, run, and reported."""
