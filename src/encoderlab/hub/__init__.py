"""Hugging Face and GGUF import, export to native transformers folders (EuroBERT, Llama) and model cards."""
