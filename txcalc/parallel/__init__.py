"""Parallel layouts: the pieces training and serving share.

``layout`` (Layout, validity) -> ``sharding`` (which part of each Op a GPU holds) ->
``comm`` (collectives); ``overheads`` (the framework's bytes beside the tensors). The
planner's evaluator over a grid of layouts is ``txcalc.train.evaluate``. Imports model/,
engine/ and the floors only.
"""
