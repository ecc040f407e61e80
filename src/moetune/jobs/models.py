"""The MODEL argument of every command: a path, ``user/model[:quant]`` or a URL.

A path is read from disk as it always was. A name is resolved as llama.cpp's ``-hf`` resolves
it (moetune.hub: the quant asked for, else Q4_K_M, then Q8_0, then the first model file; the
mmproj sibling it downloads beside the model), its headers read from the local Hugging Face
cache or over HTTP ranges; a command then prints ``-hf user/model:QUANT`` so that llama-server
fetches the files itself. ``run`` and ``bench`` need the weights: a name whose files are not in
the cache stops with how to download them; moetune never downloads weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from moetune.errors import ModelFileError
from moetune.record import record

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from moetune.core.facts import ModelFacts
    from moetune.core.projector import ProjectorFacts
    from moetune.hub import ModelName, ModelUrl, Quant, RepoListing
    from moetune.jobs.launch import LaunchSpec


@record(frozen=True)
class Model:
    """A model as a command uses it: its facts, and how llama-server is told to load it."""

    facts: ModelFacts
    path: Path | None  # on disk: the file given, or the first shard in the HF cache
    hf: str | None = None  # the -hf name (user/model:QUANT) when it came by name
    url: str | None = None  # the -mu URL when it came by URL
    sibling: ProjectorFacts | None = None  # the mmproj -hf brings along, its header read
    sibling_path: Path | None = None  # ... on disk when it is in the HF cache
    hf_files: tuple[str, ...] = ()  # the repository files -hf downloads (shards, mmproj)

    @property
    def named(self) -> tuple[str, str]:
        """How a printed command names it: ``-hf user/model:QUANT`` for a name (llama-server
        fetches the files itself), ``-mu URL`` for a URL, else ``-m PATH``."""
        if self.hf is not None:
            return "-hf", self.hf
        if self.url is not None:
            return "-mu", self.url
        return "-m", str(self.path)

    @property
    def local(self) -> bool:
        return self.path is not None

    def absolute(self) -> Model:
        """The same model, its file named absolutely (a command kept in dotfiles or a preset
        runs from any folder)."""
        from dataclasses import replace

        return replace(self, path=self.path.absolute()) if self.path is not None else self


def open_model(text: str | Path) -> Model:
    """The model ``text`` names, its headers read (a name: the quant llama.cpp would pick)."""
    from moetune.hub import parse_model_arg

    return open_named(parse_model_arg(str(text)))


def open_named(arg: Path | ModelName | ModelUrl) -> Model:
    """The model a parsed MODEL argument names (hub.parse_model_arg), its headers read."""
    from moetune.hub import ModelName, ModelUrl

    if isinstance(arg, ModelName):
        from moetune.hub import list_repo

        listing = list_repo(arg)
        return model_of_quant(arg, listing, listing.choose_quant(arg.quant))
    if isinstance(arg, ModelUrl):
        from moetune.core.facts import facts_from_gguf
        from moetune.hub import url_model

        return Model(facts_from_gguf(url_model(arg)), None, url=arg.url)
    from moetune.core.facts import facts_from_gguf
    from moetune.gguf.split import read_model

    return Model(facts_from_gguf(read_model(arg)), Path(arg))


def model_of_quant(name: ModelName, listing: RepoListing, quant: Quant) -> Model:
    """One quant of a repository: its headers (cached or remote), and its mmproj sibling."""
    from moetune.core.facts import facts_from_gguf
    from moetune.hub import cached_paths, remote_model

    facts = facts_from_gguf(remote_model(listing, quant))
    local = cached_paths(listing, quant)
    sibling, sibling_path = None, None
    if (mmproj := listing.mmproj_for(quant)) is not None:
        from moetune.core.projector import projector_from_header
        from moetune.hub import Quant

        alone = Quant("MMPROJ", (mmproj,))
        sibling = projector_from_header(remote_model(listing, alone).shards[0])
        cached = cached_paths(listing, alone)
        sibling_path = cached[0] if cached else None
    files = tuple(f.path for f in quant.files) + ((mmproj.path,) if mmproj else ())
    return Model(
        facts,
        local[0] if local else None,
        hf=f"{name.repo}:{quant.tag}",
        sibling=sibling,
        sibling_path=sibling_path,
        hf_files=files,
    )


def with_companions(
    pass_through: tuple[str, ...],
    *,
    mmproj: Path | None,
    draft: Path | None,
    absolute: bool = False,
) -> tuple[str, ...]:
    """The arguments after ``--`` with moetune's ``--mmproj`` and ``--draft`` as llama-server's
    flags among them (plan, run and bench count and load them so); ``absolute``: the
    projector's and the draft's files named absolutely (run's saved command and the aliases
    made from it run from any folder)."""
    from moetune.core.extras import absolute_files, add_extras_flags

    found = add_extras_flags(
        pass_through,
        mmproj=str(mmproj) if mmproj else None,
        draft=str(draft) if draft else None,
    )
    return absolute_files(found) if absolute else found


def network_timeout(seconds: float) -> AbstractContextManager[None]:
    """``--timeout``: how long each network step may take while this is entered (a name's
    listing, a model's headers)."""
    from moetune.hub.env import network_timeout as timeout

    return timeout(seconds)


def require_weights(model: Model) -> Model:
    """``model`` if its weights (and the projector -hf brings) are on disk; else stop and say
    how to download them (moetune never downloads weights)."""
    missing_sibling = model.sibling is not None and model.sibling_path is None
    if model.local and not missing_sibling:
        return model
    if model.hf is not None:
        repo = model.hf.split(":", 1)[0]
        raise ModelFileError(
            f"{model.hf} is not downloaded (run and bench need the weights)",
            hint=f"download it with `llama-server -hf {model.hf}` (it keeps the files in the "
            f"Hugging Face cache) or `hf download {repo} {' '.join(model.hf_files)}`, then "
            "run this again",
        )
    raise ModelFileError(
        f"{model.url} is not downloaded (run and bench need the weights)",
        hint=f"download it (e.g. `curl -LO {model.url}`) and give the file's path",
    )


def launch_model(model: Model, pass_through: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """What ``run`` and ``bench`` launch: the file on disk (absolute: a saved command runs
    from any folder), and ``pass_through`` with the mmproj sibling ``-hf`` would load, from the
    cache, unless ``pass_through`` has a projector of its own or ``--no-mmproj``."""
    from moetune.core.extras import parse_extras_flags

    model = require_weights(model)
    assert model.path is not None
    args = parse_extras_flags(pass_through)
    if model.sibling_path is not None and args.mmproj is None and args.mmproj_auto:
        pass_through = ("--mmproj", str(model.sibling_path.absolute()), *pass_through)
    return str(model.path.absolute()), pass_through


def launch_spec(
    text: str,
    pass_through: tuple[str, ...],
    *,
    server: str | None,
    cache_type: str,
    port: int | None = None,
    op_offload: int | None = None,
    parallel: int | None = None,
) -> tuple[ModelFacts, LaunchSpec]:
    """The one LaunchSpec of ``run`` and ``bench``: the model opened and checked loadable,
    its file on disk (and the mmproj sibling -hf would load), the settings the arguments
    after -- set (and the op-offload threshold: ``op_offload``, else the environment's;
    ``parallel``: ``-np N``, each slot its own cache), the threads; the context is resolved
    later, with the devices."""
    from moetune.core.settings import Settings
    from moetune.jobs.devices import physical_cores
    from moetune.jobs.launch import LaunchSpec, check_loadable, settings_from_pass_through
    from moetune.jobs.values import op_offload_min_batch
    from moetune.llamacpp.process import find_server

    chosen = open_model(text)
    check_loadable(chosen.facts)
    path, pass_through = launch_model(chosen, pass_through)
    threshold = op_offload_min_batch(op_offload)
    settings, extras = settings_from_pass_through(
        Settings(n_ctx=1, type_k=cache_type, type_v=cache_type, op_offload_min_batch=threshold),
        pass_through,
        chosen.facts,
    )
    if parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = dataclasses.replace(
            settings, n_seq=parallel, kv_unified=False, explicit_parallel=True
        )
    sibling = chosen.sibling_path
    return chosen.facts, LaunchSpec(
        binary=find_server(server),
        model=path,
        settings=settings,
        pass_through=pass_through,
        extras=extras,
        port=port,
        threads=physical_cores(),
        hf=chosen.hf,
        hf_sibling=str(sibling.absolute()) if sibling is not None else None,
    )
