"""Discriminator training: TDI and tool-set pairs to examples, grouped splits, both orders, the Trainer
stages, calibration, P/R/F1 against the name rule, and the plots.

May import: schemas/, models/, tasks.common, tasks.toolsets.
"""
