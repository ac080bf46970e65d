"""Notebook 00, the tour of PagedAttention (§4): the steps (``tour``), their figures (``tour_figures``) and the interactive explorer (``explorer``)."""
