"""Training answers' machinery: the layout search (planner), its per-rank evaluator over
numpy tables (evaluate: TrainSetting), fine-tuning fit (fit), the published runs and the
calibration on them (published_runs, calibrate).

Takes a ModelConfig; imports model/, engine/, parallel/ and the floors; never serve/,
answers/, cli/, report/ or web/.
"""
