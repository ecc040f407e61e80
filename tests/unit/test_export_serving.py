"""``moetune export``'s serving rules without a server: ``[*]`` holds nothing that moves
memory or placement (by the flag table), the router's command line keeps one model loaded
unless the models fit together, and a larger ``--models-max`` is refused with the
arithmetic."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from moetune.core.flags import FLAGS, FlagRole, moving_env
from moetune.errors import BadValueError
from moetune.jobs.export import (
    DevicePeak,
    ServeEntry,
    check_together,
    llama_swap_text,
    preset_text,
    router_command,
    serve_notes,
)
from moetune.units import GIB

from support.preset_ini import load_preset

# what a tuned command holds: the placement, the context, the cache, the slots, the batch
# sizes, --fit, the split; and two flags that move nothing (sampling, the chat template)
TUNED = tuple(
    shlex.split(
        "-ngl 99 -c 4096 --n-cpu-moe 7 -fa on -ctk q8_0 -ctv q8_0 -ub 512 -b 2048 -np 2 "
        r"--fit off -ts 1,1 -ot 'blk\.1\.ffn=CPU' -t 8 --no-kv-offload -sm layer --temp 0.7 "
        "--jinja"
    )
)


def entry(name: str, *args: str, peaks: tuple[DevicePeak, ...] = ()) -> ServeEntry:
    return ServeEntry(name, ("-m", f"/m/{name}.gguf", *args), True, "tuned", peaks=peaks)


def test_the_shared_section_holds_nothing_that_moves_memory_or_placement() -> None:
    text = preset_text([entry("a", *TUNED), entry("b", *TUNED)])
    preset = load_preset(text)
    assert preset.shared == {"temp": "0.7", "jinja": "true"}
    for keys in preset.models.values():  # each model keeps its whole placement
        assert keys["n-cpu-moe"] == "7" and keys["ctx-size"] == "4096"
        assert keys["ubatch-size"] == "512" and keys["parallel"] == "2"
        assert keys["fit"] == "off" and keys["override-tensor"] == r"blk\.1\.ffn=CPU"


def test_no_flag_the_table_says_moves_memory_is_ever_shared() -> None:
    """Every flag of the table with a value, the same in two entries: [*] holds exactly the
    PASS flags that do not move (moving_env's rule), never one whose variable a launch
    leaves out."""
    args: list[str] = []
    for f in FLAGS:
        name = next((n for n in f.names if n.startswith("--") and not n.startswith("--no-")), None)
        if name is None or f.n_values != 1 or f.file or f.role is FlagRole.LAUNCH:
            continue
        if name in ("--model", "--hf-repo", "--model-url", "--docker-repo"):
            continue
        args += [name, "1"]
    text = preset_text([entry("a", *args), entry("b", *args)])
    shared = load_preset(text).shared
    moving = moving_env()
    by_key = {n.lstrip("-"): f for f in FLAGS for n in f.names}
    assert shared  # some pass through
    for key in shared:
        f = by_key[key]
        assert f.role is FlagRole.PASS and not f.moves, key
        assert not set(f.env_names) & moving, key
    assert "n-cpu-moe" not in shared and "ctx-size" not in shared and "batch-size" not in shared


def test_llama_swap_shares_only_what_moves_nothing() -> None:
    import yaml

    text = llama_swap_text([entry("a", *TUNED), entry("b", *TUNED)], "/bin/llama-server")
    assert yaml.safe_load(text)["macros"] == {"moetune-shared": "--temp 0.7 --jinja"}
    assert "groups" not in yaml.safe_load(text) and "matrix" not in yaml.safe_load(text)


def test_a_reexport_gives_kept_sections_what_an_older_shared_section_held() -> None:
    """A file exported before this rule held ``n-cpu-moe = 7`` in [*]; re-exporting A alone
    moves it into B's kept section, so that B loads as it was tuned."""
    first = preset_text([entry("a", "--jinja", "-c", "4096"), entry("b", "--jinja", "-c", "1024")])
    old = first.replace("jinja = true\n", "jinja = true\nn-cpu-moe = 7\n", 1)
    assert load_preset(old).shared == {"jinja": "true", "n-cpu-moe": "7"}
    again = preset_text([entry("a", "--jinja", "-c", "2048")], old)
    preset = load_preset(again)
    assert preset.shared == {"jinja": "true"}
    assert preset.models["b"] == {"model": "/m/b.gguf", "ctx-size": "1024", "n-cpu-moe": "7"}
    assert preset.models["a"] == {"model": "/m/a.gguf", "ctx-size": "2048"}


def test_the_head_names_the_router_command_and_follows_models_max() -> None:
    first = preset_text([entry("a")])
    assert first.startswith("; llama-server --models-preset THIS_FILE --models-max 1 ")
    old_head = first.replace(" --models-max 1", "", 1)  # a file of an older moetune
    again = preset_text([entry("a")], old_head, models_max=2)
    assert again.startswith("; llama-server --models-preset THIS_FILE --models-max 2 ")
    assert again.count("--models-preset THIS_FILE") == 1


def test_the_router_command_is_an_argv() -> None:
    out = Path("/srv/my models.ini")
    assert router_command("preset", "/opt/llama-server", out, 1) == [
        "/opt/llama-server",
        "--models-preset",
        str(out),
        "--models-max",
        "1",
    ]
    printed = router_command("preset", "/opt/llama-server", None, 1)
    assert printed[2] == "models.ini"
    assert router_command("llama-swap", "/opt/llama-server", None, 1) == [
        "llama-swap",
        "--config",
        "config.yaml",
    ]
    note = serve_notes("preset", printed, 1)[0]
    assert "/opt/llama-server --models-preset models.ini --models-max 1" in note
    assert "one model loaded at a time" in note


def peak(device: str, peak_gib: float, budget_gib: float = 24.0) -> DevicePeak:
    return DevicePeak(
        device=device,
        peak_bytes=round(peak_gib * GIB),
        budget_bytes=round(budget_gib * GIB),
        size_bytes=24 * GIB,
    )


QWEN = entry("qwen", peaks=(peak("CUDA0", 19.36),))
GPT_OSS = entry("gpt-oss", peaks=(peak("CUDA0", 11.74),))


def test_two_models_that_fill_a_card_are_refused_together_with_the_arithmetic() -> None:
    check_together("preset", [QWEN, GPT_OSS], 1)  # one at a time: always
    with pytest.raises(BadValueError) as refused:
        check_together("preset", [QWEN, GPT_OSS], 2)
    assert str(refused.value) == (
        "--models-max 2: 2 models at once need 19.36 GiB + 11.74 GiB on CUDA0, which has 24.00 GiB"
    )
    with pytest.raises(BadValueError, match=r"2 models at once need 19\.36 GiB"):
        check_together("preset", [QWEN, GPT_OSS], 0)  # 0: the router's "no limit"


def test_models_that_fit_together_are_accepted() -> None:
    small = entry("small", peaks=(peak("CUDA0", 4.0),))
    check_together("preset", [QWEN, small], 2)
    # three of them, two at a time: the two largest are what must fit
    with pytest.raises(BadValueError, match=r"19\.36 GiB \+ 11\.74 GiB"):
        check_together("preset", [QWEN, small, GPT_OSS], 2)
    # a tighter budget than the card (a --target-vram): the budget is what counts
    tight = entry("tight", peaks=(peak("CUDA0", 4.0, budget_gib=20.0),))
    with pytest.raises(BadValueError, match=r"whose budget is 20\.00 GiB of its 24\.00 GiB"):
        check_together("preset", [QWEN, tight], 2)
    # other devices: nothing shared
    elsewhere = entry("other", peaks=(peak("CUDA1", 19.0),))
    check_together("preset", [QWEN, elsewhere], 2)


def test_an_rpc_device_is_never_shared_by_two_models() -> None:
    a = entry("a", peaks=(peak("RPC0 127.0.0.1:50052", 40 / 1024, 40 / 1024 * 3),))
    b = entry("b", peaks=(peak("RPC0 127.0.0.1:50052", 40 / 1024, 40 / 1024 * 3),))
    with pytest.raises(BadValueError, match="serves one process at a time"):
        check_together("preset", [a, b], 2)
    other = entry("c", peaks=(peak("RPC0 127.0.0.1:50053", 40 / 1024),))
    check_together("preset", [a, other], 2)  # two servers: two devices


def test_what_cannot_be_told_or_held_is_refused() -> None:
    with pytest.raises(BadValueError, match="knows no device peak of 'x'"):
        check_together("preset", [QWEN, entry("x")], 2)
    with pytest.raises(BadValueError, match="llama-swap runs one of these models at a time"):
        check_together("llama-swap", [QWEN, GPT_OSS], 2)
    with pytest.raises(BadValueError, match="give 1 or more"):
        check_together("preset", [], -1)
    check_together("llama-swap", [QWEN, GPT_OSS], 1)
