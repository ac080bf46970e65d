"""Tools apart from the paper's architecture: training the small model the engine ships with."""
