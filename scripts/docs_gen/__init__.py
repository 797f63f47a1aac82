"""The generators behind `scripts/gen_docs.py`: one module per reference page."""
