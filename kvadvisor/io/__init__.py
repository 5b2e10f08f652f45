"""The input and output boundary: every file, YAML and JSON document passes here first.

``fileio``: inputs checked before opening, outputs written atomically and never over an input;
``yamlio``: the safe YAML loader with its limits; ``jsonio``: JSON bounded before parsing.
"""
