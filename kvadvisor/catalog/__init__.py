"""Catalogs as data: models, GPUs, storage options and instance families, each figure sourced."""
