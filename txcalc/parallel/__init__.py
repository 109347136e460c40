"""Parallel layouts: sharding plan, per-GPU memory, communication and step time.

``layout`` (Layout, validity) -> ``sharding`` (which part of each Op a GPU holds) ->
``comm`` (collectives) -> ``evaluate`` (memory by category and step time over a grid).
"""
