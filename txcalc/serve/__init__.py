"""Serving answers' machinery: what an answer keeps fixed, resolved once (setting:
ServeSetting), KV cache capacity (kv), the step-time model and request simulator (sim), the
SLO screen (screen), NCCL communicator bytes (nccl), replica plans and disaggregation (plan, disagg), context-parallel prefill
(cp), load sweeps (load) and GPUs for a context and concurrency (infer).

Takes a ModelConfig (txcalc.load resolves a name, at the top); imports model/, engine/,
parallel/ and the floors; never train/, answers/, cli/, report/ or web/.
"""
