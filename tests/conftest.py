"""Fixtures shared by test modules, and the markers' selection.

Markers (pyproject.toml): ``fuzz`` tests run only when ``-m`` names them (CI runs
``pytest -m fuzz`` after the default run); ``slow`` tests (over ~2 s each, measured with
``--durations``) are listed in SLOW below, so that ``pytest -m "not slow"``, the inner loop,
runs in about two minutes and still runs some tests of every file.
"""

import os
import re

import pytest

import txcalc

#: Markers whose tests run only when the ``-m`` expression names them (or a test is named
#: by its node id on the command line).
OPT_IN = ("fuzz",)

#: Tests over ~2 s each (measured: CPU seconds per test, the machine being shared): file ->
#: test function names (every parametrisation) or one parametrisation's name (``f[id]``).
#: A name here that no longer exists fails tests/test_markers.py.
SLOW: dict[str, tuple[str, ...]] = {
    "test_calibrate.py": ("test_fit_recovers_known_efficiencies",),
    "test_calibrate_sources.py": (
        "test_a_cpu_profiler_trace_has_no_cuda_kernels", "test_calibrate_from_the_published_runs",
    ),
    "test_catalog.py": ("test_memory_checks_the_same_gpu_memory_as_plan",),
    "test_cli_output.py": ("test_validate_on_a_pipe_starts_with_its_table",),
    "test_compare.py": (
        "test_report_compare_section_is_the_compare_commands_table",
        "test_report_compare_training_runs_memory_with_the_reports_settings",
    ),
    "test_distributed.py": ("test_fsdp_fake_pg_llama3_8b_peak_within_3_percent",),
    "test_encoder_decoders.py": (
        "test_params_equal_hf_seq2seq_lm", "test_reference_model_saved_bytes_per_layer_exact",
        "test_whisper_text_decoder_alone",
    ),
    "test_files.py": ("test_report_skips_nan_and_fifo_validation_files",),
    "test_finetune.py": (
        "test_4bit_bytes_equal_bitsandbytes_params4bit",
        "test_memory_by_phase_and_category_against_memtracker",
        "test_peft_lora_on_the_hf_model_gives_the_same_trainable_count_and_flops",
        "test_trainable_flops_and_saved_bytes_exact_against_the_reference",
    ),
    "test_finetune_loss.py": (
        "test_fused_linear_backward_peak_is_the_final_norms",
        "test_memory_by_phase_against_memtracker",
    ),
    "test_fit_zero3.py": ("test_fit_over_n_gpus_is_the_planners_per_rank_total",),
    "test_fuzz_cli.py": (
        "test_every_option_of_every_command[plan train-quick]",
        "test_every_option_of_every_command[report-quick]",
        "test_every_option_of_every_command[validate-quick]",
        "test_the_fuzzer_sees_every_command_and_option",
    ),
    "test_loss_flags.py": ("test_report_single_gpu_and_adapters_equal_memory",),
    "test_plan_search.py": ("test_frontier_equals_a_search_pinned_to_each_count",),
    "test_planner.py": ("test_gpt3_training_compute",),
    "test_web_browser.py": (
        "test_a_bad_input_shows_the_clis_one_line",
        "test_a_control_change_brings_the_clis_numbers",
        "test_an_uploaded_config_json_and_the_report_link", "test_fine_tuning_answers_with_fit",
        "test_the_page_loads_with_the_default_answer",
    ),
}


@pytest.fixture(scope="module")
def big_gpu(tmp_path_factory):
    """A --gpu-file row of one GPU large enough that every preset and layout fits on it."""
    path = tmp_path_factory.mktemp("gpu") / "big.csv"
    header = open(os.path.join(os.path.dirname(txcalc.__file__), "data", "gpus.csv")).readline()
    path.write_text(header + "big,,100000,GB,4800,60,495,990,990,1980,1980,900,50,8,test\n")
    return str(path)


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marks added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = SLOW.get(item.path.name, ())
        if item.name in names or getattr(item, "originalname", None) in names:
            item.add_marker(pytest.mark.slow)
    expr = config.getoption("markexpr") or ""
    named = set(config.args)
    wanted = {m for m in OPT_IN if re.search(rf"\b{m}\b", expr)}
    keep, drop = [], []
    for item in items:
        opt_in = {m for m in OPT_IN if item.get_closest_marker(m)}
        explicit = item.nodeid in named or any(a.endswith(item.nodeid) for a in named)
        (drop if opt_in - wanted and not explicit else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
