"""PyTorch reference wrappers built from transformers modules with tiny configs (no downloads)."""
