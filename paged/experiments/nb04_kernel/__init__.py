"""Notebook 04, the attention kernel (Fig. 18a, §7.1): runs, roofline and figure (``kernel``)."""
