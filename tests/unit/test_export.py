"""``moetune export``'s files without a server: re-exporting keeps what was written by hand,
preset keys are llama-server's long names."""

from __future__ import annotations

import json

import yaml

from moetune.jobs.export import ServeEntry, llama_swap_text, preset_keys, preset_text


def test_reexport_keeps_what_was_written_by_hand() -> None:
    a = ServeEntry(
        "a", ("-m", "/m/a.gguf", "-ngl", "99", "-c", "4096", "--n-cpu-moe", "3"), True, "tuned"
    )
    b = ServeEntry(
        "user/b:Q4_K_M", ("-hf", "user/b:Q4_K_M", "-ngl", "99", "-c", "4096"), False, "plan"
    )
    first = preset_text([a, b])
    assert "hf-repo = user/b:Q4_K_M" in first and "n-cpu-moe = 3" in first
    assert "[*]" in first and "n-gpu-layers = 99" in first.split("[a]")[0]
    edited = first.replace("[a]\n", "[a]\n").replace(
        "; --- below this line: your own, kept on re-export ---\n\n[user/b",
        "; --- below this line: your own, kept on re-export ---\njinja = true\n\n[user/b",
        1,
    )
    edited += "\n[mine]\nmodel = /m/mine.gguf\n"
    again = preset_text([a._replace(args=(*a.args[:-1], "5")), b], edited)
    assert "n-cpu-moe = 5" in again and "n-cpu-moe = 3" not in again
    assert "jinja = true" in again and "[mine]\nmodel = /m/mine.gguf" in again
    assert again.count("[a]") == 1 and again.count("[*]") == 1
    swap = llama_swap_text([a, b], "/bin/llama-server")
    mine = "  my-model:\n    cmd: /bin/llama-server --port ${PORT} -m /m/mine.gguf\n"
    again_swap = llama_swap_text(
        [a._replace(args=(*a.args[:-1], "5")), b], "/bin/llama-server", swap + mine
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
