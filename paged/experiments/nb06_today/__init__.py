"""Notebook 06, beyond the paper: today's GQA / MQA models on A100, H100, H200 and L4 (``today``)."""
