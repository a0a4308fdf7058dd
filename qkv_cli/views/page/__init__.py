"""The offline HTML page of qkv view: the page itself, what it stores and its per-head statistics, the encoder-
decoder and comparison pages; view.html and its CSS and JavaScript beside them.
"""
