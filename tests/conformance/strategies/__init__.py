"""Hypothesis strategies that draw tiny Hugging Face ``config.json`` dicts, one module per family
of model types, and ``REGISTRY``: model_type -> its strategy, for every type txcalc converts.

Each family module holds the strategies one conformance test file draws from (named in its
docstring) and a ``STRATEGIES`` dict of its types; the tests import them from here. Optional
fields are left out about half the time (``common.maybe``), so that the HF class defaults are
exercised too.

The draws must stay the same from run to run: HF's answers for them are recorded
(tests/hf_record.py, keyed by the drawn config), and hypothesis seeds each parametrised test
with its pytest node id. A strategy edited here draws other configs: re-record then.
"""

from __future__ import annotations

# hf_record keeps hypothesis from mixing the project's own constants into the draws (on import):
# the configs drawn here are then the same whichever test files a session loads
from ... import hf_record  # noqa: F401
from .decoders import STRATEGIES as FIRST
from .encoder_decoders import STRATEGIES as SEQ2SEQ
from .encoders import STRATEGIES as ENCODERS
from .encoders import longformer
from .gemma3n import STRATEGIES as GEMMA3N
from .hybrids import HYBRID_STRATEGIES as HYBRIDS
from .hybrids_shared import STRATEGIES as SHARED_HYBRIDS
from .linear_attention import MULTIMODAL as LINEAR_MULTIMODAL
from .linear_attention import STRATEGIES as LINEAR
from .mllama import STRATEGIES as MLLAMA
from .multimodal import STRATEGIES as MULTIMODAL
from .norms_chunks_sinks import STRATEGIES as NEW_STRUCTURES
from .other_types import STRATEGIES as MORE

#: family -> its strategies, in the order REGISTRY merges them: where two families draw a
#: type, the later one's strategy is the type's (multimodal's Qwen-VL and Gemma 3 configs give
#: way to other_types' and norms_chunks_sinks')
FAMILIES = {"multimodal": MULTIMODAL, "decoders": FIRST, "other_types": MORE,
            "hybrids": HYBRIDS, "norms_chunks_sinks": NEW_STRUCTURES, "encoders": ENCODERS,
            "encoder_decoders": SEQ2SEQ, "linear_attention": LINEAR,
            "linear_attention_multimodal": LINEAR_MULTIMODAL, "hybrids_shared": SHARED_HYBRIDS,
            "mllama": MLLAMA, "gemma3n": GEMMA3N,
            # tested apart in test_encoders and test_longformer_global (CPU, its own heads)
            "longformer": {"longformer": longformer()}}

#: model_type -> the strategy of its config.json
REGISTRY = {t: s for family in FAMILIES.values() for t, s in family.items()}
