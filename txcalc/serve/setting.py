"""What a serving answer keeps fixed while its layouts vary (``ServeSetting``), resolved once.

    field     | what                                                | resolved from
    ----------|-----------------------------------------------------|------------------------------
    cfg       | the model (a ModelConfig: txcalc.load gives one)     | checked, never a name
    gpu       | the GPU's catalog row                                | engine.hardware.get_gpu
    kv_dtype  | the KV cache's dtype                                 | memory.KV_DTYPES
    precision | the weights' and activations' dtype                  | memory.PRECISIONS
    weights   | the weight format asked (None: the config.json's     | as given
              |   quantization_config, else ``precision``'s dtype)   |
    scheme    | the stored format of the weights (None: unquantised) | formats.resolve
    profile   | the GPU's efficiencies (None: the catalog's)         | as given; ``prof`` fills it

``serve_setting`` builds it and checks each value (the errors name the value, as before);
the serving functions take it and pass it down instead of resolving the model, the GPU and
the format again for every layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..engine.hardware import Gpu
from ..engine.timing import DeviceProfile
from ..model.config import ModelConfig


@dataclass(frozen=True)
class ServeSetting:
    """The model, GPU, dtypes and weight format of a serving answer (module table)."""

    cfg: ModelConfig
    gpu: Gpu
    kv_dtype: str = "bf16"
    precision: str = "bf16"
    weights: str | None = None
    scheme: object = None  #: formats.Scheme of the stored weights (None: the precision's dtype)
    profile: DeviceProfile | None = None

    @cached_property
    def prof(self) -> DeviceProfile:
        return self.profile or DeviceProfile.from_gpu(self.gpu)

    @property
    def prec(self):
        """memory.PRECISIONS' bytes of ``precision`` (weight, act, ...)."""
        from ..engine.memory import PRECISIONS
        return PRECISIONS[self.precision]

    @property
    def ops(self):
        from ..engine.components import model_ops_tuple
        return model_ops_tuple(self.cfg)


def serve_setting(model, gpu, *, kv_dtype: str = "bf16", precision: str = "bf16",
                  weights: str | None = None, profile: DeviceProfile | None = None,
                  gpu_file=None) -> ServeSetting:
    """The ``ServeSetting`` of these arguments, each checked: ``model`` a ModelConfig (a name
    is refused: txcalc.load resolves it, once, at the top), ``gpu`` a catalog name or a Gpu,
    the dtypes among memory's, ``weights`` a formats.scheme name."""
    from .. import inputs as I
    from ..engine import formats as Q
    from ..engine.hardware import get_gpu
    from ..engine.kvcache import KV_DTYPES
    from ..engine.memory import PRECISIONS, _check
    _check("kv dtype", kv_dtype, KV_DTYPES)
    _check("precision", precision, PRECISIONS)
    cfg = I.instance("model", model, ModelConfig, I.CONFIG_HINT)
    g = get_gpu(gpu, gpu_file)
    return ServeSetting(cfg, g, kv_dtype, precision, weights, Q.resolve(cfg, weights)[0],
                        profile)
