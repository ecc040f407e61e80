"""`moetune profiles`, `moetune alias` and `moetune doctor` (issue 6): registered on the app by
import."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from moetune import report
from moetune.alias import alias_text, check_name, parse_shell, shell_from_path
from moetune.cli import ModelArg, app, err, handle_errors, out
from moetune.doctor import DoctorInputs, diagnose
from moetune.errors import BadValueError
from moetune.hardware import detect_gpu_probe
from moetune.hardware.host import PsutilHostProbe
from moetune.kvcache import parse_cache_type
from moetune.model import load_model_facts
from moetune.profiles import (
    HardwareProfile,
    ProfileNotFoundError,
    ProfileStore,
    find_hardware_profile,
    load_hardware_profiles,
    model_identity,
    model_profile,
)
from moetune.report import profiles as render
from moetune.server import ServerInfo, find_server, server_info

profiles_app = typer.Typer(
    help="Hardware profiles (for plan --gpu) and tuned profiles (saved by run).",
    no_args_is_help=True,
)
app.add_typer(profiles_app, name="profiles")

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


@profiles_app.command("list")
@handle_errors
def list_profiles(as_json: JsonOpt = False) -> None:
    """Hardware profiles shipped with moetune (and yours), and tuned profiles saved by run."""
    hardware = load_hardware_profiles()
    store = ProfileStore()
    tuned = store.scan()
    if as_json:
        payload = render.profiles_payload(hardware, tuned, str(store.root))
        sys.stdout.write(report.to_json(payload) + "\n")
        return
    out.print(render.render_profiles_list(hardware, tuned, str(store.root)))


def _hardware_or_none(name: str) -> HardwareProfile | None:
    try:
        return find_hardware_profile(name, load_hardware_profiles())
    except (ProfileNotFoundError, BadValueError):
        return None


@profiles_app.command("show")
@handle_errors
def show(
    name: Annotated[str, typer.Argument(help="A tuned profile's name or a hardware profile id.")],
    as_json: JsonOpt = False,
) -> None:
    """One profile in full: a tuned one (with its llama-server command) or a hardware one."""
    store = ProfileStore()
    try:
        tuned = store.load(name)
    except ProfileNotFoundError:
        if (hardware := _hardware_or_none(name)) is None:
            raise ProfileNotFoundError(
                f"no tuned or hardware profile {name!r}", hint="`moetune profiles list` shows them"
            ) from None
        if as_json:
            sys.stdout.write(report.to_json(hardware.model_dump(mode="json")) + "\n")
        else:
            out.print(render.render_hardware(hardware))
        return
    if as_json:
        sys.stdout.write(report.to_json(tuned.model_dump(mode="json")) + "\n")
    else:
        out.print(render.render_tuned(tuned, str(store.path_for(name))), soft_wrap=True)


@profiles_app.command("rm")
@handle_errors
def rm(names: Annotated[list[str], typer.Argument(help="Tuned profile names.")]) -> None:
    """Delete tuned profiles (the next `moetune run` tunes again)."""
    store = ProfileStore()
    for name in names:
        if name not in store.names() and _hardware_or_none(name) is not None:
            raise BadValueError(
                f"{name!r} is a hardware profile: only tuned profiles can be removed",
                hint="a hardware profile of your own lives in $MOETUNE_HOME/hardware/",
            )
        err.print(f"removed {store.remove(name)}", highlight=False)


@app.command("alias")
@handle_errors
def alias(
    name: Annotated[str, typer.Argument(help="The command to define, e.g. qwen.")],
    model: ModelArg,
    shell: Annotated[
        str | None, typer.Option(help="bash, zsh or fish (default: from $SHELL).")
    ] = None,
    ctx: Annotated[int | None, typer.Option(help="Pick the profile tuned at this context.")] = None,
    cache_type: Annotated[
        str | None, typer.Option(help="Pick the profile tuned with this cache type.")
    ] = None,
) -> None:
    """Print a shell function that starts the tuned llama-server, for your dotfiles.

    Add it with e.g. `moetune alias qwen MODEL >> ~/.bashrc`; `qwen --port 8081` passes
    extra arguments to llama-server.
    """
    check_name(name)
    chosen = parse_shell(shell) if shell else shell_from_path(os.environ.get("SHELL"))
    cache = parse_cache_type(cache_type) if cache_type else None
    profile = model_profile(ProfileStore(), model_identity(model), ctx, cache)
    sys.stdout.write(alias_text(name, profile, chosen))


@app.command()
@handle_errors
def doctor(
    model: Annotated[
        Path | None, typer.Argument(help="Also check this GGUF model on this machine.")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="Check the model for this hardware profile, e.g. rtx4090.")
    ] = None,
    ram_bandwidth: Annotated[
        float | None, typer.Option(help="Your RAM bandwidth in GB/s (default: assume 60).")
    ] = None,
    ctx: Annotated[int | None, typer.Option(help="Context tokens (default: 32768).")] = None,
    cache_type: Annotated[str, typer.Option(help="K and V cache type.")] = "q8_0",
    server: Annotated[str | None, typer.Option(help="llama-server to check.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check this machine for expert offload; with a MODEL, its RAM needs and speed ceiling.

    GPUs, PCIe link, driver, CPU cores, RAM, swap, WSL2 and llama-server; each finding is
    ok / warn / fail with its fix.
    """
    if ram_bandwidth is not None and ram_bandwidth <= 0:
        raise BadValueError(f"--ram-bandwidth must be positive GB/s, got {ram_bandwidth}")
    hardware = load_hardware_profiles()

    def lookup() -> ServerInfo:
        return server_info(find_server(server))

    inputs = DoctorInputs(
        gpus=detect_gpu_probe(), host=PsutilHostProbe(), server=lookup, hardware=hardware,
        gpu_profile=find_hardware_profile(gpu, hardware) if gpu else None,
        ram_bandwidth_bytes_per_s=round(ram_bandwidth * 1e9) if ram_bandwidth else None,
        n_ctx=ctx, cache_type=parse_cache_type(cache_type),
    )  # fmt: skip
    found = diagnose(inputs, load_model_facts(model) if model is not None else None)
    if as_json:
        sys.stdout.write(report.to_json(render.doctor_payload(found)) + "\n")
        return
    out.print(render.render_doctor(found))
