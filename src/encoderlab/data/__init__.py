"""Data pipeline: text sources -> tokenizer -> packed memory-mapped shards -> deterministic batches."""
