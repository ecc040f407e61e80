"""``moetune export``'s files without a server: re-exporting keeps what was written by hand,
preset keys are llama-server's long names."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from moetune.errors import BadValueError
from moetune.jobs.export import (
    ServeEntry,
    arg_pairs,
    llama_swap_text,
    preset_keys,
    preset_text,
)

from support.llama_swap import load_swap
from support.preset_ini import load_preset


def test_reexport_keeps_what_was_written_by_hand() -> None:
    a = ServeEntry(
        "a",
        ("-m", "/m/a.gguf", "--jinja", "-ngl", "99", "-c", "4096", "--n-cpu-moe", "3"),
        True,
        "tuned",
    )
    b = ServeEntry(
        "user/b:Q4_K_M",
        ("-hf", "user/b:Q4_K_M", "-ngl", "99", "-c", "4096", "--jinja"),
        False,
        "plan",
    )
    first = preset_text([a, b])
    assert "hf-repo = user/b:Q4_K_M" in first and "n-cpu-moe = 3" in first
    # [*] holds what they share that moves no memory; -ngl and -c stay in each section
    globals_ = first.split("[a]")[0]
    assert "[*]" in globals_ and "jinja = true" in globals_
    assert "n-gpu-layers" not in globals_ and "ctx-size" not in globals_
    assert first.count("n-gpu-layers = 99") == 2 and first.count("ctx-size = 4096") == 2
    edited = first.replace("[a]\n", "[a]\n").replace(
        "; --- below this line: your own, kept on re-export ---\n\n[user/b",
        "; --- below this line: your own, kept on re-export ---\njinja = true\n\n[user/b",
        1,
    )
    edited += "\n[mine]\nmodel = /m/mine.gguf\n"
    again = preset_text([replace(a, args=(*a.args[:-1], "5")), b], edited)
    assert "n-cpu-moe = 5" in again and "n-cpu-moe = 3" not in again
    assert "jinja = true" in again and "[mine]\nmodel = /m/mine.gguf" in again
    assert again.count("[a]") == 1 and again.count("[*]") == 1
    swap = llama_swap_text([a, b], "/bin/llama-server")
    mine = "  my-model:\n    cmd: /bin/llama-server --port ${PORT} -m /m/mine.gguf\n"
    again_swap = llama_swap_text(
        [replace(a, args=(*a.args[:-1], "5")), b], "/bin/llama-server", swap + mine
    )
    parsed = yaml.safe_load(again_swap)
    assert set(parsed["models"]) == {"a", "user/b:Q4_K_M", "my-model"}
    assert "--n-cpu-moe 5" in parsed["models"]["a"]["cmd"]


def test_preset_keys_are_long_names() -> None:
    keys = preset_keys(
        [
            "-m",
            "/m.gguf",
            "-ngl",
            "99",
            "-fa",
            "on",
            "-ot",
            "x=CPU",
            "--no-mmproj-offload",
            "-ts",
            "3,1",
            "-ngld",
            "-1",
        ]
    )
    assert keys == {
        "model": "/m.gguf",
        "n-gpu-layers": "99",
        "flash-attn": "on",
        "override-tensor": "x=CPU",
        "no-mmproj-offload": "true",
        "tensor-split": "3,1",
        "spec-draft-ngl": "-1",
    }
    assert json.dumps(keys)


# --- hostile names and values: data, never syntax ------------------------------------------------

BINARY = "/opt/llama dir/llama-server"
# names a preset section and a model path both hold: (name, the id the router lists)
HOLDABLE = [
    ("[evil", "[evil"),
    ("a=b", "a=b"),
    ("q'uo\"te", "q'uo\"te"),
    ("a: b", "a: B"),  # the router makes the tag after the last ':' canonical
    ("user/m:ud-q4_k_xl", "user/m:Q4_K_XL"),
    ("- x", "- x"),
    ("{y}", "{y}"),
    ("&anchor", "&anchor"),
    ("*star", "*star"),
    ("!tag", "!tag"),
    ("ü模型", "ü模型"),
    ("%p @at `tick` $HOME | > ?", "%p @at `tick` $HOME | > ?"),
    ("x[y", "x[y"),
    ("yes", "yes"),
]
# what a preset cannot hold in a model's name, and in a value (a path, an argument)
NAME_NOT_IN_PRESET = [
    "x\n[evil]\nmodel=y.gguf",
    "a\rb",
    " lead",
    "tab\tx",
    "[evil]",
    "x]y",
    "*",
    "",
]
VALUE_NOT_IN_PRESET = ["x\n[evil]\nmodel=y.gguf", "a\rb", "a;b", "a#b"]


def hostile(name: str, *more: str) -> ServeEntry:
    args = ("-m", f"/m/{name}.gguf", "-ngl", "99", "-ot", r"blk\.[0-9]=CPU", *more)
    return ServeEntry(name, args, True, f"tuned {name}")


@pytest.mark.parametrize(("name", "listed"), HOLDABLE)
def test_a_preset_holds_hostile_names_as_data(name: str, listed: str) -> None:
    text = preset_text([hostile(name, "--alias", "x [y] = z 'q' \"d\"")])
    assert load_preset(text).models == {
        listed: {
            "model": f"/m/{name}.gguf",
            "n-gpu-layers": "99",
            "override-tensor": r"blk\.[0-9]=CPU",
            "alias": "x [y] = z 'q' \"d\"",
        }
    }


def test_every_holdable_name_at_once_and_again() -> None:
    entries = [hostile(name) for name, _ in HOLDABLE]
    first = preset_text(entries)
    again = preset_text(entries, first)
    preset = load_preset(again)
    assert set(preset.models) == {listed for _, listed in HOLDABLE}
    # nothing they share moves memory or placement: [*] is not written, each keeps its own
    assert preset.shared == {} and "[*]" not in again
    for keys in preset.models.values():
        assert keys["n-gpu-layers"] == "99" and keys["override-tensor"] == r"blk\.[0-9]=CPU"
    assert again == first


@pytest.mark.parametrize("name", NAME_NOT_IN_PRESET)
def test_a_name_a_preset_cannot_hold_is_refused(name: str) -> None:
    entry = ServeEntry(name, ("-m", "/m/plain.gguf"), True, "tuned")
    with pytest.raises(BadValueError, match="cannot export the model") as refused:
        preset_text([entry])
    assert "\n" not in str(refused.value) and "\r" not in str(refused.value)


@pytest.mark.parametrize("part", [*VALUE_NOT_IN_PRESET, " lead", "trail\t"])
def test_a_path_or_argument_a_preset_cannot_hold_is_refused(part: str) -> None:
    paths = [("-m", f"/m/{part}.gguf")] if part.strip() == part else []
    for args in [*paths, ("-m", "/m/a.gguf", "--alias", part)]:
        with pytest.raises(BadValueError, match=r"cannot export the model 'a' \(preset\)"):
            preset_text([ServeEntry("a", args, True, "tuned")])


def test_a_section_name_holds_comment_characters() -> None:
    entry = ServeEntry("a;b #c = d", ("-m", "/m/plain.gguf"), True, "tuned")
    assert load_preset(preset_text([entry])).models == {"a;b #c = d": {"model": "/m/plain.gguf"}}


def test_a_note_cannot_leave_its_comment() -> None:
    entry = ServeEntry("a", ("-m", "/m/a.gguf"), True, "x\n[evil]\nmodel = /e.gguf\r[b]")
    text = preset_text([entry])
    assert load_preset(text).models == {"a": {"model": "/m/a.gguf"}}
    swap = load_swap(llama_swap_text([entry], BINARY))
    assert swap == {"a": [BINARY, "--port", "5800", "-m", "/m/a.gguf"]}


def test_a_hand_written_section_of_the_same_name_is_refused() -> None:
    hand = "[*]\nctx-size = 4096\n\n[my-model]\nmodel = /m/mine.gguf\n"
    with pytest.raises(BadValueError, match=r"already has a section \[my-model\] written by hand"):
        preset_text([ServeEntry("my-model", ("-m", "/m/x.gguf"), True, "tuned")], hand)
    canon = "[user/m:q4_k_m]\nhf-repo = user/m:q4_k_m\n"
    entry = ServeEntry("user/m:Q4_K_M", ("-hf", "user/m:Q4_K_M"), True, "tuned")
    with pytest.raises(BadValueError, match="written by hand"):
        preset_text([entry], canon)
    twice = [
        ServeEntry("m", ("-m", "/a/m.gguf"), True, "t"),
        ServeEntry("m", ("-m", "/b/m.gguf"), True, "t"),
    ]
    with pytest.raises(BadValueError, match="two models would both be 'm'"):
        preset_text(twice)
    with pytest.raises(BadValueError, match="two models would both be 'm'"):
        llama_swap_text(twice, BINARY)


def test_hand_written_text_is_kept_exactly() -> None:
    """Characters other splitters break lines at (form feed, \\x85, U+2028) stay inside."""
    hand = "; mine \x0c \x85 \u2028\n[*]\nctx-size = 4096\n\n[my-model]\nmodel = /m/mine.gguf\n"
    text = preset_text([hostile("a")], hand)
    assert text.startswith(hand)
    assert load_preset(text).models["my-model"] == {"model": "/m/mine.gguf"}


# every name llama-swap can hold: the holdable ones and those only a preset cannot hold
SWAP_NAMES = [name for name, _ in HOLDABLE] + ["[evil]", "a;b", "a#b", "*", "a # b", "k: v # c"]


@pytest.mark.parametrize("name", SWAP_NAMES)
def test_llama_swap_holds_hostile_names_and_arguments(name: str) -> None:
    args = ("-m", f"/m/{name}\r.gguf", "--alias", "a  b\t'c' \"d\" \\e $f `g` #h ;i", "-c", "")
    text = llama_swap_text([ServeEntry(name, args, True, name)], BINARY)
    assert load_swap(text) == {name: [BINARY, "--port", "5800", *args]}


def test_llama_swap_with_every_name_at_once_shares_a_macro() -> None:
    entries = [hostile(name, "--alias", f"{name}\r", "--jinja") for name in SWAP_NAMES]
    text = llama_swap_text(entries, BINARY)
    argv = load_swap(text)
    assert set(argv) == set(SWAP_NAMES)
    for entry in entries:
        got = argv[entry.name]
        assert got[:2] == [BINARY, "--port"]
        assert sorted(arg_pairs(got[3:])) == sorted(arg_pairs(entry.args))
    assert yaml.safe_load(text)["macros"] == {"moetune-shared": "--jinja"}  # not -ngl, -ot
    again = llama_swap_text(entries, BINARY, text + "  mine:\n    cmd: /bin/x --port ${PORT}\n")
    assert set(load_swap(again)) == {*SWAP_NAMES, "mine"}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("-m", "/m/a\n#b.gguf"), "a newline"),
        (("-m", "/m/${PORT}.gguf"), r"'\$\{'"),
        (("-m", "/m/${env.HOME}.gguf"), r"'\$\{'"),
        (("-m", "/m/a\0b.gguf"), "NUL"),
    ],
)
def test_llama_swap_refuses_what_its_cmd_cannot_hold(args: tuple[str, ...], why: str) -> None:
    with pytest.raises(BadValueError, match=rf"cannot export the model 'a' \(llama-swap\).*{why}"):
        llama_swap_text([ServeEntry("a", args, True, "tuned")], BINARY)


@pytest.mark.parametrize("name", ["x\n[evil]", "a\rb", " lead", "${env.HOME}", ""])
def test_llama_swap_refuses_a_name_that_is_not_plain_text(name: str) -> None:
    with pytest.raises(BadValueError, match="cannot export the model"):
        llama_swap_text([ServeEntry(name, ("-m", "/m/a.gguf"), True, "t")], BINARY)


def test_llama_swap_refuses_a_hand_written_model_of_the_same_name() -> None:
    hand = "# mine\nmodels:\n  'my-model':  # kept\n    cmd: /bin/x --port ${PORT}\n"
    with pytest.raises(BadValueError, match="already has a model 'my-model' written by hand"):
        llama_swap_text([ServeEntry("my-model", ("-m", "/m/a.gguf"), True, "t")], BINARY, hand)
    kept = llama_swap_text([ServeEntry("other", ("-m", "/m/a.gguf"), True, "t")], BINARY, hand)
    assert kept.startswith("# mine\nmodels:\n") and "'my-model':  # kept" in kept
    assert set(load_swap(kept)) == {"my-model", "other"}


def test_llama_swap_refuses_a_file_it_cannot_merge_into() -> None:
    entry = ServeEntry("a", ("-m", "/m/a.gguf"), True, "t")
    for broken in ("models: [\n", "models: {mine: {cmd: x}}\n", "- a\n- b\n"):
        with pytest.raises(BadValueError, match="llama-swap file"):
            llama_swap_text([entry], BINARY, broken)


def test_a_long_shared_macro_is_inlined() -> None:
    """llama-swap refuses a macro value of 1024 characters or more."""
    rule = "blk\\.(" + "|".join(str(i) for i in range(400)) + ")\\.ffn=CPU"
    entries = [ServeEntry(n, ("-m", f"/m/{n}.gguf", "-ot", rule), True, "t") for n in "ab"]
    text = llama_swap_text(entries, BINARY)
    assert "${moetune-shared}" not in text
    assert load_swap(text)["b"] == [BINARY, "--port", "5801", "-m", "/m/b.gguf", "-ot", rule]


def _argv(text: str) -> dict[str, list[str]]:
    """Each model's argv, ``${PORT}`` aside (load_swap numbers the ports in name order)."""
    return {name: [*argv[:2], *argv[3:]] for name, argv in load_swap(text).items()}


def _block(text: str, name: str) -> str:
    """moetune's marked block of ``name`` in ``text``, its lines."""
    start = text.index(f"  # moetune: begin {name}\n")
    end = text.index(f"  # moetune: end {name}\n", start)
    return text[start : end + len(f"  # moetune: end {name}\n")]


def test_llama_swap_reexport_keeps_other_models_entries() -> None:
    """`export llama-swap B --out F` after `export llama-swap A --out F` keeps A's entry, as
    `export preset` keeps A's section; re-exporting A replaces its entry where it stands."""
    a = ServeEntry("a", ("-m", "/m/a.gguf", "-c", "4096"), True, "tuned")
    b = ServeEntry("b", ("-m", "/m/b.gguf", "-c", "8192"), True, "tuned")
    hand = "# mine\nmodels:\n  my-model:\n    cmd: /bin/x --port ${PORT}\n"
    first = llama_swap_text([a], BINARY, hand)
    both = llama_swap_text([b], BINARY, first)
    assert first.replace("models:\n", "models:\n" + _block(both, "b")) == both  # A's kept
    assert set(load_swap(both)) == {"a", "b", "my-model"}
    a5 = replace(a, args=("-m", "/m/a.gguf", "-c", "5000"))
    again = llama_swap_text([a5], BINARY, both)
    assert _argv(again)["a"] == [BINARY, "--port", "-m", "/m/a.gguf", "-c", "5000"]
    assert _argv(again)["b"] == _argv(both)["b"] and again.count("begin a\n") == 1
    assert again.replace(_block(again, "a"), _block(both, "a")) == both  # where it stood


def test_llama_swap_reexport_keeps_the_commands_of_models_that_share_the_macro() -> None:
    """A and C exported together share a macro; exporting B (alone, then with C) changes it:
    A's kept entry gets the old macro's value written in, so its command stays the same."""
    a, b, c = (
        ServeEntry(n, ("-m", f"/m/{n}.gguf", "-c", "4096", "--temp", "0.5", "--jinja"), True, "t")
        for n in "abc"
    )
    b = replace(b, args=("-m", "/m/b.gguf", "-c", "8192", "--jinja"))
    first = llama_swap_text([a, c], BINARY)
    assert yaml.safe_load(first)["macros"] == {"moetune-shared": "--temp 0.5 --jinja"}
    alone = llama_swap_text([b], BINARY, first)
    assert "${moetune-shared}" not in alone and not yaml.safe_load(alone)["macros"]
    assert _argv(alone) == {**_argv(first), "b": _argv(llama_swap_text([b], BINARY))["b"]}
    with_c = llama_swap_text([b, c], BINARY, first)  # a new macro (--temp's not in it)
    assert _argv(with_c)["a"] == _argv(first)["a"] and _argv(with_c)["c"] == _argv(first)["c"]
    assert yaml.safe_load(with_c)["models"]["a"]["cmd"].count("${moetune-shared}") == 0
    same = llama_swap_text([a, c], BINARY, alone)  # the macro back; b kept as it was
    assert _argv(same) == _argv(alone)
