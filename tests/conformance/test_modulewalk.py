"""The module-walk fallback (txcalc.model.modulewalk): a model_type without a converter.

- Parameters: for 22 model types no converter covers (vision, audio, multimodal, state-space and
  less common LMs), `txcalc params CONFIG --json` equals sum(numel) of the HF model built here on
  the meta device (tied weights once), and the JSON says "method": "module-walk".
- FLOPs: each per-call rule the walk claims (Linear, HF Conv1D, ungrouped ConvNd; 0 for
  Embedding and torch norms) is checked against FlopCounterMode, forward and backward, on every
  call a tiny CPU model makes; for ResNet, whose every matmul and convolution sits in a ruled
  module, the rules add up to FlopCounterMode's whole training step.
- What is not proven is reported as such (null FLOPs, listed classes, "not counted").
- Bad configs exit 2 with one line; without torch/transformers the error says how to install.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

from txcalc.cli import main  # noqa: E402
from txcalc.errors import ConfigError  # noqa: E402
from txcalc.model.hf import CONVERTERS  # noqa: E402
from txcalc.model import modulewalk  # noqa: E402
from txcalc.model.modulewalk import walk, walk_hf_dict  # noqa: E402

# (model_type, class a user loads: None = AutoModel, config overrides). Default configs (the
# transformers class defaults: ViT-B/16, CLIP ViT-B/32, wav2vec2-base, RWKV 7B, ...) except where
# a default cannot build.
TYPES = [
    ("vit", "ViTForImageClassification", {}),
    ("deit", "DeiTForImageClassificationWithTeacher", {}),
    ("beit", "BeitForMaskedImageModeling", {}),
    ("swin", "SwinForImageClassification", {}),
    ("convnext", "ConvNextForImageClassification", {}),
    ("dinov2", None, {}),
    ("clip", "CLIPModel", {}),
    ("siglip", "SiglipModel", {}),
    ("wav2vec2", "Wav2Vec2ForCTC", {}),
    ("hubert", "HubertForCTC", {}),
    ("wavlm", None, {}),
    ("audio-spectrogram-transformer", "ASTForAudioClassification", {}),
    ("segformer", "SegformerForSemanticSegmentation", {}),
    ("resnet", "ResNetForImageClassification", {}),
    ("mobilevit", "MobileViTForImageClassification", {}),
    ("xlnet", "XLNetLMHeadModel", {}),
    ("mobilebert", "MobileBertForMaskedLM", {}),
    ("falcon_mamba", "FalconMambaForCausalLM", {}),
    ("rwkv", "RwkvForCausalLM", {}),
    ("imagegpt", "ImageGPTForCausalImageModeling", {}),
    ("big_bird", "BigBirdForMaskedLM", {}),
    ("canine", None, {}),
]


def hf_config(model_type: str, **over):
    return CONFIG_MAPPING[model_type](**over)


def write_config(tmp_path: Path, model_type: str, arch: str | None = None, **over) -> str:
    raw = json.loads(hf_config(model_type, **over).to_json_string())
    raw["model_type"] = model_type
    if arch:
        raw["architectures"] = [arch]
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


def hf_model(model_type: str, arch: str | None, device="meta", **over):
    """The reference: the class a user loads, built here (not through txcalc)."""
    cfg = hf_config(model_type, **over)
    with torch.device(device):
        if arch is None:
            return transformers.AutoModel.from_config(cfg)
        return getattr(transformers, arch)(cfg)


def run_json(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err  # transformers' warnings are muted: nothing on stderr
    return json.loads(out)


def check_one_line_error(capsys, argv, *names) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("txcalc: error"), err
    for n in names:
        assert n in err, (n, err)
    return err


# --------------------------------------------------------------------------------------------
# parameters: exact against HF on meta, for 22 model types without a converter
# --------------------------------------------------------------------------------------------

def test_twenty_types_have_no_converter():
    without = [t for t, _, _ in TYPES if t not in CONVERTERS]
    assert len({t for t, _, _ in TYPES}) == len(TYPES) >= 20
    # a type that gains a converter is still walked below through walk_hf_dict
    assert len(without) >= 20, without


@pytest.mark.parametrize("model_type, arch, over", TYPES, ids=[t for t, _, _ in TYPES])
def test_params_equal_hf(capsys, tmp_path, model_type, arch, over):
    path = write_config(tmp_path, model_type, arch, **over)
    model = hf_model(model_type, arch, **over)
    expected = sum(p.numel() for p in model.parameters())  # each tied tensor once
    if model_type in CONVERTERS:  # pragma: no cover  (a converter was added after this test)
        got = walk_hf_dict(json.loads(Path(path).read_text()), model_type).to_json()
    else:
        got = run_json(capsys, ["params", path, "--json"])
    assert got["method"] == "module-walk"
    assert got["total_params"] == expected, (model_type, got["total_params"], expected)
    assert got["model_class"] == type(model).__name__
    assert got["model_class_source"] == ("architectures[0]" if arch else
                                         got["model_class_source"])
    assert got["exact"]["params"].startswith("exact")
    assert got["exact"]["activations"] == "not counted"
    # the rows are named by module paths of the model and add up to the total
    paths = dict(model.named_modules())
    rows = got["modules"]
    assert all(r["path"] in paths or r["path"] == "(root)" for r in rows)
    assert sum(r["params"] for r in rows) == expected
    # every row's own parameters are those of its module, minus the ones counted earlier
    for r in rows:
        mod = model if r["path"] == "(root)" else paths[r["path"]]
        own = sum(p.numel() for p in mod.parameters(recurse=False))
        assert r["params"] <= own and (r["params"] == own) == ("tied" not in r), r


def test_tied_weights_counted_once(capsys, tmp_path):
    path = write_config(tmp_path, "falcon_mamba", "FalconMambaForCausalLM", hidden_size=64,
                        num_hidden_layers=2, vocab_size=1000)
    got = run_json(capsys, ["params", path, "--json"])
    model = hf_model("falcon_mamba", "FalconMambaForCausalLM", hidden_size=64,
                     num_hidden_layers=2,
                     vocab_size=1000)
    assert model.lm_head.weight is model.backbone.embeddings.weight
    lm_head = next(r for r in got["modules"] if r["path"] == "lm_head")
    assert lm_head["params"] == 0 and lm_head["tied"] == ["weight=backbone.embeddings.weight"]
    # the head still computes: its per-row FLOPs are claimed
    assert lm_head["flops_fwd_per_row"] == 2 * 64 * 1000
    # untied: the head's weight is counted in its row
    path = write_config(tmp_path, "falcon_mamba", "FalconMambaForCausalLM", hidden_size=64,
                        num_hidden_layers=2, vocab_size=1000, tie_word_embeddings=False)
    untied = run_json(capsys, ["params", path, "--json"])
    assert untied["total_params"] == got["total_params"] + 64 * 1000


def test_hf_class_option_and_auto_model(capsys, tmp_path):
    """Without architectures a decoder's config counts its causal LM (what
    AutoModelForCausalLM loads, tests/conformance/test_modulewalk_default_class.py);
    --hf-class AutoModel counts the base model."""
    path = write_config(tmp_path, "xlnet", None, d_model=64, n_layer=2, n_head=2, d_inner=128,
                        vocab_size=500)
    base = run_json(capsys, ["params", path, "--json", "--hf-class", "AutoModel"])
    assert base["model_class"] == "XLNetModel" and base["model_class_source"] == "--hf-class"
    head = run_json(capsys, ["params", path, "--json"])
    assert head["model_class"] == "XLNetLMHeadModel" and head["model_class_source"].startswith(
        "XLNetLMHeadModel: the causal LM AutoModelForCausalLM loads")
    # the LM head is tied to the word embedding: only its bias is new
    assert head["total_params"] == base["total_params"] + 500
    check_one_line_error(capsys, ["params", path, "--hf-class", "NoSuchModel"], "NoSuchModel",
                         "--hf-class")
    check_one_line_error(capsys, ["params", "llama-3-8b", "--hf-class", "AutoModel"],
                         "--hf-class", "converter")


def test_a_part_config_builds_its_own_class(capsys, tmp_path):
    """blip_vision_model (a part of BLIP) has no AutoModel entry: the class built for exactly
    its config class is BlipVisionModel."""
    path = write_config(tmp_path, "blip_vision_model")
    got = run_json(capsys, ["params", path, "--json"])
    ref = hf_model("blip_vision_model", "BlipVisionModel")
    assert got["model_class"] == "BlipVisionModel" and "AutoModel does not map" in \
        got["model_class_source"]
    assert got["total_params"] == sum(p.numel() for p in ref.parameters())


def test_human_output(capsys, tmp_path):
    path = write_config(tmp_path, "falcon_mamba", "FalconMambaForCausalLM", hidden_size=64,
                        num_hidden_layers=2, vocab_size=1000)
    assert main(["params", path]) == 0
    out = capsys.readouterr().out
    assert "module-walk" in out and "FalconMambaForCausalLM" in out
    assert "not counted" in out and "FalconMambaMixer" in out


# --------------------------------------------------------------------------------------------
# FLOPs: every claimed rule equals FlopCounterMode, forward and backward
# --------------------------------------------------------------------------------------------

TINY = [  # real CPU tensors, tiny sizes: (model_type, class, config overrides, inputs)
    ("vit", "ViTForImageClassification",
     dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
          image_size=32, patch_size=8),
     lambda: dict(pixel_values=torch.randn(2, 3, 32, 32))),
    ("resnet", "ResNetForImageClassification",
     dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="bottleneck"),
     lambda: dict(pixel_values=torch.randn(2, 3, 32, 32))),
    ("wav2vec2", "Wav2Vec2ForCTC",
     dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
          conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
          num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, vocab_size=20),
     lambda: dict(input_values=torch.randn(2, 400))),
    ("imagegpt", "ImageGPTForCausalImageModeling",
     dict(n_embd=32, n_layer=2, n_head=2, vocab_size=65, n_positions=64),
     lambda: dict(input_ids=torch.randint(0, 64, (2, 16)))),
    ("falcon_mamba", "FalconMambaForCausalLM",
     dict(hidden_size=32, num_hidden_layers=2, vocab_size=100, state_size=4),
     lambda: dict(input_ids=torch.randint(0, 100, (2, 12)))),
    ("xlnet", "XLNetLMHeadModel",
     dict(d_model=32, n_layer=2, n_head=2, d_inner=64, vocab_size=100),
     lambda: dict(input_ids=torch.randint(0, 100, (2, 12)))),
]


def first_output(out):
    t = out.logits if getattr(out, "logits", None) is not None else out[0]
    return t


def rows_of_call(module, inp, out, rule) -> int:
    if rule == "conv":  # output positions: batch x length/area/volume
        return out.numel() // module.out_channels
    width = module.in_features if isinstance(module, torch.nn.Linear) else module.weight.shape[0]
    return inp.numel() // width


def traced_calls(model, rules, inputs):
    """Forward under FlopCounterMode with hooks on ruled modules: per path, the FLOPs
    FlopCounterMode attributes in the forward, and each call's (input shape, requires_grad,
    rows)."""
    calls: dict[str, list] = {p: [] for p in rules}
    handles = []
    for path, mod in model.named_modules():
        if path in rules:
            def hook(m, args, out, path=path):
                x = args[0]
                calls[path].append((tuple(x.shape), x.dtype, x.requires_grad,
                                    rows_of_call(m, x, out, rules[path].rule)))
            handles.append(mod.register_forward_hook(hook))
    with FlopCounterMode(display=False) as fc:
        out = model(**inputs)
    for h in handles:
        h.remove()
    counts = fc.get_flop_counts()
    name = type(model).__name__
    fwd = {p: sum(counts.get(f"{name}.{p}", {}).values()) for p in rules}
    return out, calls, fwd, fc.get_total_flops()


@pytest.mark.parametrize("model_type, arch, over, inputs", TINY, ids=[t[0] for t in TINY])
def test_claimed_flops_are_exact(model_type, arch, over, inputs):
    torch.manual_seed(0)
    model = hf_model(model_type, arch, device="cpu", **over)
    model.train()
    rows, _ = walk(model, torch)
    claimed = {r.path: r for r in rows if r.flops_fwd_per_row is not None}
    linear_like = [r for r in claimed.values() if r.rule in ("linear", "conv")]
    assert linear_like, model_type
    _, calls, fwd, _ = traced_calls(model, claimed, inputs())
    n_checked = 0
    for path, row in claimed.items():
        # forward, in the whole model: FlopCounterMode's attribution to the module
        assert fwd[path] == sum(row.flops_fwd_per_row * c[3] for c in calls[path]), path
        # forward and backward of each call, replayed alone (backward attribution inside a
        # model is unreliable, MEASURING.md): the rule x rows, input gradient only with grad
        mod = dict(model.named_modules())[path]
        for shape, dtype, rg, n_rows in set(calls[path]):
            if dtype.is_floating_point:
                x = torch.randn(shape, dtype=dtype, requires_grad=rg)
            else:
                x = torch.randint(0, mod.num_embeddings, shape)
            with FlopCounterMode(display=False) as f_fwd:
                y = mod(x)
            with FlopCounterMode(display=False) as f_bwd:
                y.float().sum().backward()
            assert f_fwd.get_total_flops() == row.flops_fwd_per_row * n_rows, path
            assert f_bwd.get_total_flops() == row.flops_fwd_per_row * n_rows * (1 + rg), path
            n_checked += 1
    # each called Linear/Conv was checked (Mamba's reference kernels use out_proj's weight
    # without calling the module: per-call rules claim nothing for such use)
    called = [r for r in linear_like if calls[r.path]]
    assert called and n_checked >= len(called), model_type


def test_resnet_whole_step_from_rules():
    """Every matmul and convolution of ResNet sits in a ruled module (Conv2d groups 1, Linear;
    BatchNorm has none): the rules x the rows of each call give FlopCounterMode's whole training
    step, forward and backward."""
    over, inputs = TINY[1][2], TINY[1][3]
    torch.manual_seed(0)
    model = hf_model("resnet", "ResNetForImageClassification", device="cpu", **over)
    rows, _ = walk(model, torch)
    claimed = {r.path: r for r in rows if r.flops_fwd_per_row is not None}
    assert all(r.rule for r in rows)  # nothing in ResNet is left unruled
    out, calls, _, total_fwd = traced_calls(model, claimed, inputs())
    with FlopCounterMode(display=False) as fb:
        first_output(out).sum().backward()
    pred_fwd = sum(claimed[p].flops_fwd_per_row * c[3] for p in calls for c in calls[p])
    pred_bwd = sum(claimed[p].flops_fwd_per_row * c[3] * (1 + c[2]) for p in calls
                   for c in calls[p])
    assert total_fwd == pred_fwd > 0
    assert fb.get_total_flops() == pred_bwd > pred_fwd  # the stem conv: weight gradient only


# --------------------------------------------------------------------------------------------
# what is not proven is reported as such
# --------------------------------------------------------------------------------------------

def test_unproven_parts_are_marked(capsys, tmp_path):
    """FalconMamba's mixer (its own A_log, D), its depthwise Conv1d and its RMSNorm have no
    rule (mamba itself has a converter now; falcon_mamba has none):
    null FLOPs in their rows and listed under not_counted; FlopCounterMode does find FLOPs
    there, which the walk does not claim."""
    over = TINY[4][2]
    path = write_config(tmp_path, "falcon_mamba", "FalconMambaForCausalLM", **over)
    got = run_json(capsys, ["params", path, "--json"])
    by_class = {r["class"]: r for r in got["not_counted"]}
    assert {"FalconMambaMixer", "Conv1d", "FalconMambaRMSNorm"} <= set(by_class)
    for r in got["modules"]:
        if r["class"] in by_class:
            assert r["flops_rule"] is None and r["flops_fwd_per_row"] is None, r
            assert "flops_bwd_per_row" not in r
    assert "not counted" in got["exact"]["flops"] and got["exact"]["activations"] == \
        "not counted"
    assert got["ruled_params"] < got["total_params"]
    # the unruled modules do compute: the whole forward exceeds what the rules claim
    torch.manual_seed(0)
    model = hf_model("falcon_mamba", "FalconMambaForCausalLM", device="cpu", **over)
    rows, _ = walk(model, torch)
    claimed = {r.path: r for r in rows if r.flops_fwd_per_row is not None}
    _, calls, _, total = traced_calls(model, claimed, TINY[4][3]())
    claimed_total = sum(claimed[p].flops_fwd_per_row * c[3] for p in calls for c in calls[p])
    assert total > claimed_total


def test_subclasses_and_grouped_convs_are_not_ruled():
    class TwiceLinear(torch.nn.Linear):  # a subclass may compute anything
        def forward(self, x):
            return super().forward(super().forward(x))

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), TwiceLinear(4, 4),
                                torch.nn.Conv1d(4, 4, 3, groups=2), torch.nn.Conv1d(4, 4, 3),
                                torch.nn.ConvTranspose1d(4, 4, 3))
    rows = {r.path: r for r in walk(model, torch)[0]}
    assert rows["0"].rule == "linear" and rows["3"].rule == "conv"
    for p in ("1", "2", "4"):
        assert rows[p].rule == "" and rows[p].flops_fwd_per_row is None


# --------------------------------------------------------------------------------------------
# bad configs: one line, exit 2; nothing huge is built
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("over, names", [
    (dict(hidden_size="abc"), ["vit", "abc"]),
    (dict(num_attention_heads=0), ["vit", "ZeroDivisionError"]),
    (dict(num_hidden_layers=4096), ["num_hidden_layers", "4096", "2,048"]),
    (dict(num_hidden_layers=-1), ["num_hidden_layers", "-1", "negative"]),
    (dict(hidden_size=2**21), ["hidden_size", "2097152", "1,048,576"]),
])
def test_bad_configs_exit_2(capsys, tmp_path, over, names):
    raw = json.loads(hf_config("vit").to_json_string()) | {"model_type": "vit"} | over
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    check_one_line_error(capsys, ["params", str(path)], *names)


def test_depths_add_up_per_stack(capsys, tmp_path):
    path = write_config(tmp_path, "swin", None, depths=[1000, 1000, 100],
                        num_heads=[3, 6, 12])
    check_one_line_error(capsys, ["params", path], "2100 layers", "2,048")


def test_bounds_take_every_default_config_of_transformers():
    """The bounds read unknown field names by their shape; none refuses the default config of
    any model type transformers has (about 820), whose sizes are real models'."""
    refused = []
    for model_type, cls in CONFIG_MAPPING.items():
        try:
            raw = json.loads(cls().to_json_string())
        except Exception:  # noqa: BLE001  (a few configs need arguments)
            continue
        try:
            modulewalk.check_bounds(raw, model_type)
        except ConfigError as e:
            refused.append(str(e))
    assert refused == []


def test_module_budget_stops_the_build(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(modulewalk, "MAX_MODULES", 50)
    path = write_config(tmp_path, "vit")
    check_one_line_error(capsys, ["params", path], "more than 50 modules")


def test_large_model_builds_on_meta(capsys, tmp_path):
    """RWKV at 64 layers x 8,192 wide and a 2^20 vocabulary: ~59 billion parameters counted
    exactly without allocating them."""
    over = dict(hidden_size=8192, num_hidden_layers=64, vocab_size=2**20)
    path = write_config(tmp_path, "rwkv", "RwkvForCausalLM", **over)
    got = run_json(capsys, ["params", path, "--json"])
    model = hf_model("rwkv", "RwkvForCausalLM", **over)
    assert got["total_params"] == sum(p.numel() for p in model.parameters()) > 5 * 10**10


def test_other_commands_refuse_in_one_line(capsys, tmp_path):
    path = write_config(tmp_path, "vit")
    for argv in (["flops", path], ["memory", path], ["plan", "train", path, "--tokens", "1B",
                                                     "--gpu", "h100"]):
        check_one_line_error(capsys, argv, "'vit'", "only `txcalc params`")


def test_type_unknown_to_transformers(capsys, tmp_path):
    path = write_config(tmp_path, "vit")
    raw = json.loads(Path(path).read_text()) | {"model_type": "no_such_type"}
    Path(path).write_text(json.dumps(raw))
    check_one_line_error(capsys, ["params", path], "'no_such_type'", "transformers",
                         "supported:", "llama")


def test_without_torch_the_error_says_how_to_install(capsys, tmp_path, monkeypatch):
    path = write_config(tmp_path, "vit")
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    err = check_one_line_error(capsys, ["params", path], "not installed", "pip install",
                               "txcalc[hf]")
    assert "torch" in err
    with pytest.raises(ConfigError, match="txcalc\\[hf\\]"):
        walk_hf_dict({"model_type": "vit"}, "vit")


@pytest.mark.parametrize("name", ["llama-3-8b.json", "gpt2.json", "mixtral-8x7b.json",
                                  "t5-small.json", "deepseek-v3.json"])
def test_walk_agrees_with_converters(name):
    """Python API: walk_config walks any config.json; for a type with a converter (and the same
    class: these files name CausalLM/LM-head classes whose heads the converters count) the two
    independent counts agree."""
    import txcalc
    from txcalc.model.modulewalk import walk_config

    path = str(Path(__file__).parents[1] / "data" / "hf" / name)
    w = walk_config(path)
    assert w.class_source == "architectures[0]"
    assert w.total == txcalc.params(path).total
