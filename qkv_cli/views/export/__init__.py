"""Arrays out of a Result: NPZ, JSON and CSV by kind, and the one way files are written (checked first, written whole
or not at all).
"""
