"""Training answers' machinery: the layout search (planner, over the grid of grid.py), its
per-rank evaluator over numpy tables (evaluate) and what it keeps fixed with the costs of
grouped ops (setting: TrainSetting), the global batch's default, ceiling and candidates
(batch), the plan's plausibility warnings (guards), fine-tuning fit (fit), the published runs
and the calibration on them (published_runs, calibrate).

Takes a ModelConfig; imports model/, engine/, parallel/ and the floors; never serve/,
answers/, cli/, report/ or web/.
"""
