"""Figures with matplotlib's object API: heatmaps, the model view, the comparison figure, their style, fonts and
captions. May import views.console's clean() only, never the page.
"""
