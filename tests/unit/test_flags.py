"""One flag table for llama-server's arguments (core/flags.py): the one tokenizer, and every
argv walker over the same argv (server/test_flags.py holds the table to the build's
``--help``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.core.command import (
    conflicting_args,
    device_args,
    hf_argv,
    pass_through_int,
    pass_through_value,
    rpc_endpoints,
)
from moetune.core.extras import (
    SPEC_TYPES,
    _flags,
    absolute_files,
    parse_extras_flags,
    with_draft,
    without_extras_flags,
)
from moetune.core.flags import FLAGS, FlagRole, Pair, flag, lookup, moving_env, pairs, words
from moetune.errors import BadValueError
from moetune.jobs.export import arg_pairs, preset_keys
from moetune.jobs.verify import on_disk
from moetune.llamacpp.process import launch

# the same argv for every walker: = forms, repeated flags, values that start with "-", a flag
# the table does not know (and its would-be value)
ARGV = (
    "-m",
    "m.gguf",
    "--mmproj=p.gguf",
    "-md",
    "d.gguf",
    "--seed",
    "-1",
    "--override-kv",
    "tokenizer.ggml.add_bos_token=bool:false",
    "-ot",
    "-x=CPU",
    "-dev=CUDA0",
    "--rpc",
    "127.0.0.1:50052",
    "--rpc=127.0.0.1:50053",
    "-ub",
    "1024",
    "--ubatch_size",
    "2048",
    "--jinja",
    "--spec-type",
    "draft-simple",
    "--spec-type",
    "ngram-mod",
    "--no-mmproj-offload",
    "--host",
    "0.0.0.0",
    "--made-up-flag",
    "x",
)


def test_each_name_is_one_flag() -> None:
    names = [name for entry in FLAGS for name in entry.names]
    assert len(names) == len(set(names))
    assert all(name.startswith("-") for name in names)
    assert [e.names[0] for e in FLAGS if e.file] == ["-mm", "--spec-draft-model"]
    assert flag("--spec-type").value == ",".join(SPEC_TYPES)  # what parse_extra_args knows


# --- the tokenizer ---------------------------------------------------------------------------


def test_pairs_by_the_table() -> None:
    found = pairs(ARGV)
    assert [(pair.name, pair.values, pair.joined) for pair in found] == [
        ("-m", ("m.gguf",), False),
        ("--mmproj", ("p.gguf",), True),
        ("-md", ("d.gguf",), False),
        ("--seed", ("-1",), False),
        ("--override-kv", ("tokenizer.ggml.add_bos_token=bool:false",), False),
        ("-ot", ("-x=CPU",), False),
        ("-dev", ("CUDA0",), True),
        ("--rpc", ("127.0.0.1:50052",), False),
        ("--rpc", ("127.0.0.1:50053",), True),
        ("-ub", ("1024",), False),
        ("--ubatch_size", ("2048",), False),
        ("--jinja", (), False),
        ("--spec-type", ("draft-simple",), False),
        ("--spec-type", ("ngram-mod",), False),
        ("--no-mmproj-offload", (), False),
        ("--host", ("0.0.0.0",), False),
        ("--made-up-flag", (), False),
        ("x", (), False),
    ]
    assert words(found) == list(ARGV)
    assert found[10].key == "--ubatch-size" and found[10].flag is flag("-ub")
    assert found[-2].flag is None and found[-1].flag is None
    assert [pair.role for pair in found[:3]] == [
        FlagRole.PLACEMENT,
        FlagRole.PROJECTOR,
        FlagRole.DRAFT,
    ]


def test_pairs_edge_cases() -> None:
    assert pairs(["-t"]) == [Pair("-t", (), flag("-t"))]
    assert pairs(["-t"])[0].missing
    # two values
    assert pairs(["--control-vector-layer-range", "-1", "5", "-t", "4"])[0].values == ("-1", "5")
    # a flag without values written with "=": a word the table does not know
    assert pairs(["--jinja=1"]) == [Pair("--jinja=1")]
    # the value of "=" is everything after the first "="
    assert pairs(["-ot=a=CPU"])[0].values == ("a=CPU",)
    assert pairs(["-dev="])[0].values == ("",)
    assert lookup("--n_gpu_layers") is flag("-ngl")
    assert lookup("-n_gpu_layers") is None  # only "--" names read "_" as "-"
    with pytest.raises(KeyError):
        flag("--made-up-flag")


# --- every walker over the same argv ---------------------------------------------------------


def test_every_walker_over_the_same_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # core/extras
    parsed = parse_extras_flags(ARGV)
    assert (parsed.mmproj, parsed.draft) == ("p.gguf", "d.gguf")
    assert parsed.mmproj_offload is False
    assert parsed.spec_types == ("draft-simple", "ngram-mod")
    assert without_extras_flags(ARGV) == [  # and --jinja, --host: llama-fit-params takes neither
        "-m",
        "m.gguf",
        "--seed",
        "-1",
        "--override-kv",
        "tokenizer.ggml.add_bos_token=bool:false",
        "-ot",
        "-x=CPU",
        "-dev=CUDA0",
        "--rpc",
        "127.0.0.1:50052",
        "--rpc=127.0.0.1:50053",
        "-ub",
        "1024",
        "--ubatch_size",
        "2048",
        "--made-up-flag",
        "x",
    ]
    made_absolute = list(ARGV)
    made_absolute[2] = f"--mmproj={tmp_path / 'p.gguf'}"
    made_absolute[4] = str(tmp_path / "d.gguf")
    assert absolute_files(ARGV) == tuple(made_absolute)
    assert "--ubatch-size" in _flags(ARGV) and "-1" not in _flags(ARGV)
    assert with_draft(ARGV, "d.gguf")[:2] == ("-md", "d.gguf")  # a --spec-type is there
    # core/command
    devices, others = device_args(ARGV)
    assert devices == ["-dev=CUDA0", "--rpc", "127.0.0.1:50052", "--rpc=127.0.0.1:50053"]
    assert others == [*ARGV[:11], *ARGV[15:]]
    assert pass_through_value(ARGV, "-ub", "--ubatch-size") == "2048"  # the last one wins
    assert pass_through_int(ARGV, "-ub", "--ubatch-size") == 2048
    assert pass_through_value(ARGV, "-dev", "--device") == "CUDA0"
    assert pass_through_value(ARGV, "--seed") == "-1"
    assert pass_through_value(ARGV, "-sm", "--split-mode") is None
    assert rpc_endpoints(ARGV) == ["127.0.0.1:50052", "127.0.0.1:50053"]
    assert conflicting_args(ARGV) == ["-m", "-ot"]
    assert hf_argv(ARGV, "u/m:Q4", sibling="p.gguf") == ["-hf", "u/m:Q4", *ARGV[3:]]
    # jobs/export
    assert preset_keys(ARGV) == {
        "model": "m.gguf",
        "mmproj": "p.gguf",
        "model-draft": "d.gguf",
        "seed": "-1",
        "override-kv": "tokenizer.ggml.add_bos_token=bool:false",
        "override-tensor": "-x=CPU",
        "device": "CUDA0",
        "rpc": "127.0.0.1:50053",
        "ubatch-size": "2048",
        "jinja": "true",
        "spec-type": "ngram-mod",
        "no-mmproj-offload": "true",
        "host": "0.0.0.0",
        "made-up-flag": "true",
        "x": "true",
    }
    assert arg_pairs(ARGV) == pairs(ARGV)
    # jobs/verify
    by_name = ["-hf", "u/m:Q4", *ARGV[2:]]
    assert on_disk(by_name, "/m/m.gguf") == ["-m", "/m/m.gguf", *ARGV[2:]]
    # llamacpp/process: --host is launch's own
    with pytest.raises(BadValueError, match="--host is set by moetune"):
        launch(tmp_path / "llama-server", ARGV)


def test_a_flag_without_its_value_after_dashes() -> None:
    with pytest.raises(BadValueError, match="-md after -- needs a value"):
        parse_extras_flags(["-md"])


# --- the divergences the one table ends (each failed before it) --------------------------------


def test_hf_argv_names_the_model_by_any_spelling() -> None:
    """It left ``--model x`` and ``--mmproj=s`` alone."""
    argv = ["llama-server", "--model", "/c/m.gguf", "--mmproj=/c/s.gguf", "-c", "4096"]
    assert hf_argv(argv, "u/m:Q4", sibling="/c/s.gguf") == [
        "llama-server",
        "-hf",
        "u/m:Q4",
        "-c",
        "4096",
    ]


def test_on_disk_reads_the_equals_form() -> None:
    """It left ``-hf=u/m:Q4``."""
    assert on_disk(["-hf=u/m:Q4", "-c", "4096"], "/c/m.gguf") == ["-m", "/c/m.gguf", "-c", "4096"]


def test_extra_value_of_an_empty_equals_form() -> None:
    """``extra_value(['-dev=', 'CUDA1'])`` returned 'CUDA1': the next word, no value of -dev."""
    assert pass_through_value(["-dev=", "CUDA1"], "-dev", "--device") == ""


def test_a_flag_without_a_value_takes_none() -> None:
    """``arg_pairs(['--jinja', 'chat.tmpl'])`` paired the two: --jinja takes no value."""
    assert preset_keys(["--jinja", "chat.tmpl"]) == {"jinja": "true", "chat.tmpl": "true"}


def test_extra_value_is_the_last_one() -> None:
    """It took the first ``-ub`` where llama-server (and parse_extra_args) take the last."""
    assert pass_through_value(["-ub", "1024", "-ub", "2048"], "-ub", "--ubatch-size") == "2048"


def test_a_value_is_never_a_flag(tmp_path: Path) -> None:
    """A value that looks like a flag belongs to the flag before it: ``-a --port`` names an
    alias, ``--chat-template -m`` a template."""
    assert conflicting_args(["--chat-template", "-m"]) == []
    assert without_extras_flags(["-t", "--spec-default"]) == ["-t", "--spec-default"]
    assert device_args(["-a", "--rpc", "-t", "4"]) == ([], ["-a", "--rpc", "-t", "4"])
    with pytest.raises(BadValueError, match="--port=8080 is set by moetune"):
        launch(tmp_path / "llama-server", ["-a", "--host", "--port=8080"])


def test_a_preset_key_is_one_of_the_flags_long_names() -> None:
    """A row's ``preset`` (the key export writes for its short names) is one of its own long
    names without dashes, never a negation's; every short name moetune writes has one."""
    for row in FLAGS:
        if row.preset is not None:
            longs = [n.removeprefix("--") for n in row.names if n.startswith("--")]
            assert row.preset in longs and not row.preset.startswith("no-"), row
    written = ("-m", "-hf", "-ngl", "-ncmoe", "-ot", "-ts", "-ctk", "-ctv", "-c", "-fa", "-t")
    assert all(flag(name).preset is not None for name in written)
    keys = preset_keys(
        ["-ngl", "99", "--gpu-layers", "9", "-ngld", "0", "-md", "d.gguf", "-n", "8"]
    )
    assert keys == {"n-gpu-layers": "99", "gpu-layers": "9", "spec-draft-ngl": "0"} | {
        "model-draft": "d.gguf",
        "n": "8",
    }


# --- the environment's variables ---------------------------------------------------------------


def test_env_names_add_the_negations_twin() -> None:
    """common_arg::get_env: a flag with negations is read from its LLAMA_ARG_NO_ twin too."""
    assert flag("-kvo").env_names == ("LLAMA_ARG_KV_OFFLOAD", "LLAMA_ARG_NO_KV_OFFLOAD")
    assert flag("-no-kvu").env_names == ("LLAMA_ARG_KV_UNIFIED", "LLAMA_ARG_NO_KV_UNIFIED")
    assert flag("--no-host").env_names == ("LLAMA_ARG_NO_HOST",)  # a flag, not a negation
    assert flag("-ncmoe").env_names == ("LLAMA_ARG_N_CPU_MOE",)
    assert flag("-mmdev").env_names == ("MTMD_BACKEND_DEVICE",)  # no LLAMA_ARG_ prefix
    assert flag("-tb").env_names == ()
    names = [name for row in FLAGS for name in row.env_names]
    assert len(names) == len(set(names))  # one variable, one flag


def test_moves_marks_pass_flags_with_a_variable() -> None:
    """``moves`` is read for the environment only: a PASS flag's, one that has a variable."""
    for row in FLAGS:
        if row.moves:
            assert row.role is FlagRole.PASS and row.env is not None, row


def test_moving_env_is_what_would_move_the_placement() -> None:
    moving = moving_env()
    placement = {row.env for row in FLAGS if row.role is FlagRole.PLACEMENT and row.env}
    assert placement <= moving
    for name in (
        "N_CPU_MOE",
        "CPU_MOE",
        "OVERRIDE_TENSOR",
        "N_GPU_LAYERS",
        "TENSOR_SPLIT",
        "MODEL",
        "HF_REPO",
        "CTX_SIZE",
        "BATCH",
        "UBATCH",
        "CACHE_TYPE_K",
        "FLASH_ATTN",
        "N_PARALLEL",
        "THREADS",
        "KV_OFFLOAD",
        "NO_KV_OFFLOAD",
        "NO_HOST",
        "SPLIT_MODE",
        "N_CPU_FFN",
        "FIT",
        "FIT_TARGET",
        "RPC",
        "DEVICE",
        "MAIN_GPU",
        "MMPROJ",
        "NO_MMPROJ_OFFLOAD",
        "SPEC_DRAFT_MODEL",
        "N_GPU_LAYERS_DRAFT",
        "PORT",
    ):
        assert f"LLAMA_ARG_{name}" in moving, name
    assert "MTMD_BACKEND_DEVICE" in moving  # the projector's device
    passing = ("LLAMA_ARG_TEMPERATURE", "LLAMA_ARG_ALIAS", "LLAMA_ARG_JINJA", "LLAMA_API_KEY")
    assert not moving & {*passing, "HF_TOKEN", "LLAMA_ARG_CHAT_TEMPLATE", "LLAMA_ARG_N_PREDICT"}


@pytest.mark.parametrize(
    ("value", "read"),
    [("2048", 2048), (" 7", 7), ("+5", 5), ("1e3", 1), ("12 ", 12), ("0x10", 0), ("-1", None)],
)
def test_pass_through_int_reads_as_llama_server_does(value: str, read: int | None) -> None:
    """std::stoi's reading: white space and a sign before ASCII digits, the rest ignored; a
    negative value is llama.cpp's default (``-t -1``)."""
    assert pass_through_int(["-t", value], "-t", "--threads") == read


@pytest.mark.parametrize(
    "value", ["nan", "inf", "", "²", "١٢", "9" * 5000, "2147483648", "-2147483649"]
)
def test_pass_through_int_refuses_what_llama_server_refuses(value: str) -> None:
    with pytest.raises(BadValueError, match=r"^-ub .*after --"):
        pass_through_int(["-ub", value], "-ub", "--ubatch-size")
    with pytest.raises(BadValueError, match="no value"):
        pass_through_int(["-c", "1", "-ub"], "-ub", "--ubatch-size")
