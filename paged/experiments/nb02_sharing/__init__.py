"""Notebook 02, sharing (§6.3, §6.4; Fig. 14-16): the runs (``sharing``) and their figures (``sharing_figures``)."""
