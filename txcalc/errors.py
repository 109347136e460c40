"""Errors raised on user input. The CLI prints each as one line and exits 2."""


class TxcalcError(ValueError):
    """Base class for every error caused by user input (bad config, unknown name, bad option)."""


class ConfigError(TxcalcError):
    """A ModelConfig, a preset name or a config.json that cannot describe a model."""


class WorkloadError(TxcalcError):
    """A workload (batch, sequence, dtype, optimizer, ...) that is impossible for the model."""


class PlanError(TxcalcError):
    """A plan no layout can satisfy (does not fit, deadline impossible, bad option)."""
