"""Serving answers' machinery: KV cache capacity (kv), the step-time model and request
simulator (sim), the SLO screen (screen), replica plans and disaggregation (plan, disagg),
context-parallel prefill (cp), load sweeps (load) and GPUs for a context and concurrency
(infer).

Imports model/, engine/, parallel/ and the floors; never train/, answers/, cli/, report/ or
web/.
"""
