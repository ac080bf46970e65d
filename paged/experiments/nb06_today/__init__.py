"""Notebook 06, today's models (GQA / MQA on A100, H100, H200 and L4): the runs and their figures (``today``)."""
