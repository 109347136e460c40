"""Fixtures shared by test modules, and the markers' selection.

Markers (pyproject.toml): ``fuzz`` tests run only when ``-m`` names them (CI runs
``-m "fuzz or not fuzz"``: everything, the full fuzz included); ``slow`` tests (over ~2 s each, measured with
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
#: A name here that no longer exists fails tests/unit/test_markers.py.
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
    "test_engine.py": (
        "test_t5_small_pytorch_keeps_more_without_recompute",
        "test_zero2_zero3_equal_fsdp2_every_policy", "test_zero3_vs_zero2_fsdp2_fake_pg",
    ),
    "test_files.py": ("test_report_skips_nan_and_fifo_validation_files",),
    "test_finetune.py": (
        "test_4bit_bytes_equal_bitsandbytes_params4bit",
        "test_first_step_totals_against_memtracker_with_frozen_tables",
        "test_memory_by_phase_and_category_against_memtracker",
        "test_memtracker_keeps_the_previous_steps_leaf",
        "test_peft_lora_on_the_hf_model_gives_the_same_trainable_count_and_flops",
        "test_trainable_flops_and_saved_bytes_exact_against_the_reference",
    ),
    "test_finetune_loss.py": (
        "test_fused_linear_backward_peak_is_the_final_norms",
        "test_memory_by_phase_against_memtracker",
    ),
    "test_finetune_plan.py": ("test_fsdp2_rank_bytes_equal_prediction",),
    "test_fit_zero3.py": ("test_fit_over_n_gpus_is_the_planners_per_rank_total",),
    "test_fuzz_cli.py": (
        "test_every_option_of_every_command[plan train-quick]",
        "test_every_option_of_every_command[report-quick]",
        "test_every_option_of_every_command[validate-quick]",
        "test_the_fuzzer_sees_every_command_and_option",
    ),
    "test_gpu_validate.py": ("test_gpu_script_dry_run_on_cpu_writes_every_case",),
    "test_loss_flags.py": ("test_report_single_gpu_and_adapters_equal_memory",),
    "test_memory_phases.py": ("test_memory_after_each_phase_within_1pct_of_memtracker",),
    "test_plan_search.py": ("test_frontier_equals_a_search_pinned_to_each_count",),
    "test_planner.py": ("test_gpt3_training_compute",),
    "test_presets.py": ("test_preset_params_equal_hf_model_on_meta",),
    "test_model_type_list.py": ("test_qwen2_5_vl_72b_language_model",),
    "test_report.py": (
        "test_committed_example_equals_a_fresh_run",
        "test_example_params_equal_the_hf_model_on_meta",
        "test_helper_processes_draw_the_same_bytes_as_this_process",
        "test_html_renders_in_headless_chromium_with_every_plot_visible",
        "test_json_output_names_the_answer_and_the_files",
        "test_model_and_gpu_names_from_files_are_escaped", "test_pngs_are_deterministic",
        "test_report_copies_the_planner_answers_exactly",
        "test_rewriting_replaces_a_previous_report_and_leaves_no_temporaries",
        "test_the_recorded_command_reproduces_the_report",
        "test_validation_report_rows_are_shown_largest_error_first",
    ),
    "test_report_safety.py": (
        "test_a_failed_write_removes_the_parents_it_made",
        "test_a_file_added_to_a_txcalc_report_blocks_replacing_it",
        "test_a_path_component_over_255_bytes_is_one_line",
        "test_a_symlink_is_refused_not_replaced",
        "test_a_writer_that_holds_the_lock_too_long_is_one_line", "test_an_empty_folder_is_fine",
        "test_calibrate_out_must_be_a_regular_file",
        "test_calibrate_replaces_its_profile_atomically",
        "test_math_text_in_model_and_gpu_names_is_drawn_as_written",
        "test_sigint_and_sigterm_at_20_random_moments",
        "test_the_html_and_markdown_carry_no_control_or_bidi_characters",
    ),
    "test_serve_throughput.py": ("test_fp8_throughput_every_held_out_row_within_25_percent",),
    "test_serving.py": (
        "test_cli_plot_writes_two_pngs",
        "test_disaggregation_wins_for_long_prompts_under_a_tight_itl_slo",
        "test_engine_rules_differ_where_the_releases_did",
        "test_experts_touched_matches_a_monte_carlo_of_top_k_routing",
    ),
    "test_serving_screen.py": ("test_screened_search_gives_the_unscreened_answer",),
    "test_stacks_recompute.py": ("test_fused_kernels_saved_bytes_exact",),
    "test_terminal_width.py": ("test_plan_train_at_width",),
    "test_training_validation.py": (
        "test_fitted_constants_are_the_fit_sets_answer",
        "test_gathered_column_linear_saves_the_whole_input",
    ),
    "test_web.py": (
        "test_every_panel_answers_the_cli_json",
        "test_the_report_link_writes_and_serves_the_report",
    ),
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
