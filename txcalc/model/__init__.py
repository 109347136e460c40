"""The model: what a Transformer is, before any cost is counted.

Owns ModelConfig (config), the named presets, Hugging Face config.json conversion (hf/: one
record per model type), the Hub cache (hub) and the module walk of models without a
converter (modulewalk). Imports only the floors (errors, inputs, safeio, units); nothing
here imports engine, parallel, train, serve, answers, cli, report or web.
"""
