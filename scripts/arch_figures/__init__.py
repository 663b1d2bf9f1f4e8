"""The figures of scripts/architecture_figures.py: the parsed tree and its import graph
(tree.py), sizes, imports, types and exceptions (measures.py), name tests, docstrings and
duplicates (names.py). Standard library only; nothing of the measured tree is imported."""
