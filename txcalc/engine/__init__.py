"""The engine: every cost of a model as Op rows and their sums.

Owns the op rows (ops, components, mixers), the workload and its loss (workload, lm_loss),
parameter, FLOP and memory accounting (accounting, memory, finetune, formats), timing and
hardware tables (timing, hardware) and the training stacks' declared kernels (stacks).
Imports model/ and the floors; never parallel, train, serve, answers, cli, report or web.
"""
