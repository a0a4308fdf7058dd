"""Views: console tables, figures, export (NPZ/JSON/CSV), explain, mask, heads, shapes and models.

Views read Results (core.result) and never compute attention themselves (explain's trace recomputes one head
with the plain formulas, on purpose). rich and matplotlib are imported here and nowhere below.
"""
