"""Notebook 03, throughput (§6.2; Fig. 12, 13, 17): the runs and ratio tables (``throughput``) and their figures (``throughput_figures``)."""
