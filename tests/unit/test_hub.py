"""moetune.hub: names, llama.cpp's quant choice, listings and headers over a local fake hub
(tests/fakehub.py), the caches, the errors, and where the token may go. No internet."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from moetune.errors import ExitCode, GGUFFormatError, MoetuneError, TruncatedHeaderError
from moetune.gguf.reader import GGUFHeader, read_header, read_header_prefix
from moetune.gguf.split import GGUFModel, read_model
from moetune.hub import (
    ModelName,
    ModelUrl,
    Quant,
    RepoFile,
    RepoListing,
    cached_paths,
    choose_quant,
    hub_endpoint,
    list_repo,
    mmproj_for,
    parse_model_arg,
    quants,
    remote_model,
    url_model,
)

from support.factory import (
    QWEN3_30B_A3B,
    _add_big_keys,
    _add_big_tokenizer,
    _nbytes,
    _qwen3moe_tensors,
    write_header_only,
)
from support.fakehub import FakeHub, Misbehave, fake_hub
from support.projector_factory import write_projector

REPO = "acme/Qwen3-30B-A3B-GGUF"
TOKEN = "hf_" + "Abc123" * 6  # shaped like a real token (llama.cpp checks the shape)
MiB = 1 << 20


def write_split_header(prefix: Path, max_tensors: int = 20) -> list[Path]:
    """A small header-only Qwen3-MoE written as llama-gguf-split's shards would be."""
    shape = replace(QWEN3_30B_A3B, n_vocab=1000, n_layers=4)
    w = gguf.GGUFWriter(prefix.with_suffix(".gguf"), "qwen3moe", split_max_tensors=max_tensors)
    _add_big_keys(w, shape, "F16")
    _add_big_tokenizer(w, 1000, 500)
    for name, dims, qtype in _qwen3moe_tensors(shape, "F16"):
        w.add_tensor_info(name, dims, np.dtype(np.float32), _nbytes(dims, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return sorted(prefix.parent.glob(f"{prefix.name}-*-of-*.gguf"))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hubfiles")
    out = {
        "Qwen3-30B-A3B-Q4_K_M.gguf": write_header_only(root / "q4.gguf", sparse=True),
        "Qwen3-30B-A3B-Q8_0.gguf": write_header_only(
            root / "q8.gguf", quant="F16", n_layers=6, n_vocab=2000, n_merges=100, sparse=True
        ),
        "mmproj-Qwen3-30B-A3B-F16.gguf": write_projector(root / "mmproj.gguf"),
        "README.md": root / "README.md",
    }
    out["README.md"].write_text("# a model card\n")
    (root / "BF16").mkdir()
    for shard in write_split_header(root / "BF16" / "Qwen3-30B-A3B-BF16"):
        out[f"BF16/{shard.name}"] = shard
    out["tiny-F16.gguf"] = write_header_only(
        root / "tiny.gguf", quant="F16", n_layers=2, n_vocab=300, n_merges=10
    )
    return out


@pytest.fixture(scope="module")
def served(files: dict[str, Path]) -> Iterator[FakeHub]:
    with fake_hub() as hub:
        hub.add_repo(REPO, {k: v for k, v in files.items() if k != "tiny-F16.gguf"})
        hub.add_repo("acme/tiny", {"tiny-F16.gguf": files["tiny-F16.gguf"]})
        hub.add_repo("acme/gated-GGUF", {"gated-Q4_K_M.gguf": files["tiny-F16.gguf"]}, TOKEN)
        yield hub


@pytest.fixture
def hub(served: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """The fake hub as the endpoint, an empty Hugging Face cache, no token."""
    served.reset()
    monkeypatch.setenv("MODEL_ENDPOINT", served.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_ENDPOINT", "HF_TOKEN", "LLAMA_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    return served


def same_header(a: GGUFHeader, b: GGUFHeader) -> None:
    assert a._replace(path=b.path) == b


def same_model(a: GGUFModel, b: GGUFModel) -> None:
    assert a.tensors == b.tensors
    assert a.metadata == b.metadata
    for x, y in zip(a.shards, b.shards, strict=True):
        same_header(x, y)


# --- names ----------------------------------------------------------------------------------


def test_parse_model_arg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_model_arg("unsloth/Qwen3-30B-A3B-GGUF:q4_k_m") == ModelName(
        "unsloth/Qwen3-30B-A3B-GGUF", "q4_k_m"
    )
    assert parse_model_arg("user/model").spec == "user/model"  # type: ignore[union-attr]
    assert ModelName("a/b", "q8_0").spec == "a/b:Q8_0"
    url = "https://huggingface.co/a/b/resolve/main/x-Q4_K_M.gguf"
    assert parse_model_arg(url) == ModelUrl(url)
    assert parse_model_arg("user/model.gguf") == Path("user/model.gguf")  # a file, missing
    for text in ("a/b/c", "-a/b", "a/b-", "a//b", "a/b:c:d", "model.gguf", "a/b:Q4 K"):
        assert isinstance(parse_model_arg(text), Path), text
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "model").write_bytes(b"GGUF")
    assert parse_model_arg("user/model") == Path("user/model")  # an existing path wins


def test_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MODEL_ENDPOINT", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    assert hub_endpoint() == "https://huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example/")
    assert hub_endpoint() == "https://mirror.example"
    monkeypatch.setenv("MODEL_ENDPOINT", "http://models.local:8080")
    assert hub_endpoint() == "http://models.local:8080"


# --- llama.cpp's choice ---------------------------------------------------------------------


def listing_of(*paths: str) -> RepoListing:
    return RepoListing("u/m", "0" * 40, tuple(RepoFile(p, 100 + i) for i, p in enumerate(paths)))


def tags(quant: Quant) -> tuple[str, tuple[str, ...]]:
    return quant.tag, tuple(f.path for f in quant.files)


def test_quant_choice_follows_llama_cpp() -> None:
    files = listing_of(
        "README.md",
        "M-F16.gguf",
        "M-Q8_0.gguf",
        "M.imatrix.gguf",
        "mmproj-M-F16.gguf",
        "Q4_K_M/M-Q4_K_M-00002-of-00002.gguf",
        "Q4_K_M/M-Q4_K_M-00001-of-00002.gguf",
        "mtp-M-Q4_K_M.gguf",
        "M-IQ4_XS.gguf",
    )
    split = ("Q4_K_M/M-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/M-Q4_K_M-00002-of-00002.gguf")
    assert tags(choose_quant(files, None)) == ("Q4_K_M", split)
    assert tags(choose_quant(files, "q4_k_m")) == ("Q4_K_M", split)
    assert choose_quant(files, "Q4_K_M").size_bytes == 105 + 106
    assert tags(choose_quant(files, "iq4_xs")) == ("IQ4_XS", ("M-IQ4_XS.gguf",))
    assert [q.tag for q in quants(files)] == ["F16", "Q8_0", "Q4_K_M", "IQ4_XS"]
    no_q4 = listing_of("M-F16.gguf", "M-Q8_0.gguf")
    assert choose_quant(no_q4, None).tag == "Q8_0"
    assert choose_quant(listing_of("a/M-BF16.gguf", "M-F16.gguf"), None).first.path == (
        "a/M-BF16.gguf"
    )
    with pytest.raises(MoetuneError) as info:
        choose_quant(files, "Q5_K_M")
    assert info.value.exit_code == ExitCode.FILE_NOT_FOUND
    assert "has no Q5_K_M quant; it has F16, Q8_0, Q4_K_M, IQ4_XS" in info.value.message
    with pytest.raises(MoetuneError, match="no GGUF model files"):
        choose_quant(listing_of("README.md", "mmproj-F16.gguf"), None)


def test_mmproj_sibling() -> None:
    files = listing_of(
        "mmproj-F32.gguf",
        "mmproj-F16.gguf",
        "sub/mmproj-BF16.gguf",
        "other/mmproj-Q8_0.gguf",
        "sub/M-Q8_0.gguf",
        "M-Q4_K_M.gguf",
    )
    q8 = choose_quant(files, "Q8_0")
    assert mmproj_for(files, q8) == files.files[2]  # deepest folder shared with the model
    q4 = choose_quant(files, "Q4_K_M")
    assert mmproj_for(files, q4) == files.files[1]  # 16 bits is nearest to 4 of those at the top
    alone = listing_of("M-Q4_K_M.gguf")
    assert alone.mmproj_for(choose_quant(alone, None)) is None


# --- the reader on a prefix -----------------------------------------------------------------


def test_prefix_parse_asks_for_more(header_only_big: Path) -> None:
    from moetune.hub.remote import _next_end

    data = header_only_big.read_bytes()
    full = read_header(header_only_big)
    size = 20 << 30
    have = 4096
    for _ in range(8):
        try:
            header = read_header_prefix(data[:have], size, "x.gguf")
            break
        except TruncatedHeaderError as exc:
            assert exc.needed_bytes > have
            have = min(len(data), _next_end(have, exc.needed_bytes))
    else:
        pytest.fail("never complete")
    assert header.tensors == full.tensors and header.file_bytes == size
    assert header.has_tensor_data
    with pytest.raises(GGUFFormatError, match="exceeds the file"):
        read_header_prefix(data[:4096], 4096 + 100, "x.gguf")  # counts vs the FILE size


# --- over the fake hub ----------------------------------------------------------------------


def ranged_gets(hub: FakeHub, name: str) -> int:
    return sum(1 for s in hub.requests("cdn", "GET") if name in s.path and s.range)


def test_remote_model_equals_the_file(hub: FakeHub, files: dict[str, Path]) -> None:
    listing = list_repo(ModelName(REPO))
    assert listing.commit == hub.repos[REPO].commit
    quant = choose_quant(listing, None)
    assert quant.tag == "Q4_K_M"
    model = remote_model(listing, quant)
    same_model(model, read_model(files["Qwen3-30B-A3B-Q4_K_M.gguf"]))
    assert model.paths == (Path(f"{REPO}/Qwen3-30B-A3B-Q4_K_M.gguf"),)
    assert model.file_bytes == quant.size_bytes > 17 << 30 and model.has_tensor_data
    served = sum(hub.bytes_served.values())
    assert served <= 8 * MiB and ranged_gets(hub, "Q4_K_M") <= 4, (served, hub.requests())
    assert mmproj_for(listing, quant) == RepoFile(
        "mmproj-Qwen3-30B-A3B-F16.gguf",
        files["mmproj-Qwen3-30B-A3B-F16.gguf"].stat().st_size,
        hub.repos[REPO].oid("mmproj-Qwen3-30B-A3B-F16.gguf"),
    )


def test_split_quant_over_the_hub(hub: FakeHub, files: dict[str, Path]) -> None:
    listing = list_repo(ModelName(REPO, "bf16"))
    quant = choose_quant(listing, "bf16")
    assert [f.path.rsplit("-", 3)[-3] for f in quant.files] == ["00001", "00002", "00003"]
    model = remote_model(listing, quant)
    same_model(model, read_model(files["BF16/Qwen3-30B-A3B-BF16-00001-of-00003.gguf"]))
    assert {t.shard for t in model.tensors} == {0, 1, 2}
    for f in quant.files:
        assert ranged_gets(hub, f.path) == 1  # small shards: one range each


def test_the_caches_make_a_second_plan_offline(hub: FakeHub) -> None:
    name = ModelName(REPO, "Q8_0")
    first = remote_model(listing := list_repo(name), choose_quant(listing, name.quant))
    assert hub.requests("hub") and hub.requests("cdn")
    hub.reset()
    again = list_repo(name)
    assert again == listing
    same_model(remote_model(again, choose_quant(again, name.quant)), first)
    assert hub.requests() == []  # no refs, no tree, no range


def test_a_cached_header_keeps_where_its_vocabulary_ends(hub: FakeHub) -> None:
    from moetune.hub import cache

    name = ModelName(REPO, "Q8_0")
    listing = list_repo(name)
    quant = choose_quant(listing, name.quant)
    first = remote_model(listing, quant)
    file = quant.first
    held = cache.load_header(
        f"oid:{file.oid}" if file.oid else f"rev:{REPO}@{listing.commit}:{file.path}"
    )
    assert held is not None
    assert held.skips and held.skips == first.shards[0].skips
    same_model(remote_model(listing, quant), first)  # read again, jumping over them


def test_refs_revalidate_by_etag(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    from moetune.hub import cache

    list_repo(ModelName(REPO))
    hub.reset()
    monkeypatch.setattr(cache, "REFS_FRESH_S", 0.0)
    list_repo(ModelName(REPO))
    assert [s.path for s in hub.requests()] == [f"/api/models/{REPO}/refs"]


def test_url_model(hub: FakeHub, files: dict[str, Path]) -> None:
    repo = hub.repos[REPO]
    url = f"{hub.endpoint}/{REPO}/resolve/{repo.commit}/BF16/Qwen3-30B-A3B-BF16-00002-of-00003.gguf"
    model = url_model(ModelUrl(url))
    same_model(model, read_model(files["BF16/Qwen3-30B-A3B-BF16-00001-of-00003.gguf"]))
    hub.reset()
    url_model(ModelUrl(url))  # an immutable (commit) URL: straight from the cache
    assert hub.requests() == []
    main = f"{hub.endpoint}/{REPO}/resolve/main/Qwen3-30B-A3B-Q8_0.gguf"
    url_model(ModelUrl(main))
    hub.reset()
    url_model(ModelUrl(main))  # a branch URL: one HEAD to check the ETag, no range
    assert [s.method for s in hub.requests()] == ["HEAD", "HEAD"]  # hub 302, then the CDN


def hf_cache_with(tmp_path: Path, repo: str, commit: str, files: dict[str, Path]) -> Path:
    """Lay ``files`` out as huggingface_hub and llama.cpp do: blobs, snapshot links, refs."""
    root = tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    for rel, src in files.items():
        oid = f"{abs(hash(rel)):064x}"[-64:]
        blob = root / "blobs" / oid
        blob.parent.mkdir(exist_ok=True)
        with src.open("rb") as source:  # the header, then a hole as long as the file
            blob.write_bytes(source.read(read_header(src).data_offset))
        os.truncate(blob, src.stat().st_size)
        link = root / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return root


def test_local_hf_cache(
    hub: FakeHub, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = "c" * 40
    q8 = "Qwen3-30B-A3B-Q8_0.gguf"
    split = {k: v for k, v in files.items() if k.startswith("BF16/")}
    root = hf_cache_with(tmp_path, "acme/cached", commit, {q8: files["tiny-F16.gguf"], **split})
    monkeypatch.setenv("MODEL_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: offline
    listing = list_repo(ModelName("acme/cached"))
    assert listing.commit == commit and {f.path for f in listing.files} == {q8, *split}
    assert all(f.oid and len(f.oid) == 64 for f in listing.files)
    quant = choose_quant(listing, None)
    assert quant.first.path == q8
    paths = cached_paths(listing, quant)
    assert paths == (root / "snapshots" / commit / q8,)
    same_model(remote_model(listing, quant), read_model(files["tiny-F16.gguf"]))
    bf16 = choose_quant(listing, "BF16")
    assert cached_paths(listing, bf16) is not None and len(bf16.files) == 3
    (root / "snapshots" / commit / bf16.files[1].path).unlink()
    assert cached_paths(listing, bf16) is None


def test_a_cached_shard_is_read_from_disk(
    hub: FakeHub, files: dict[str, Path], tmp_path: Path
) -> None:
    repo = hub.repos[REPO]
    q8 = "Qwen3-30B-A3B-Q8_0.gguf"
    hf_cache_with(tmp_path, REPO, repo.commit, {q8: files[q8]})
    listing = list_repo(ModelName(REPO))
    model = remote_model(listing, choose_quant(listing, "Q8_0"))
    assert hub.requests("cdn") == [] and model.paths[0].is_file()


# --- errors ---------------------------------------------------------------------------------


def fails(code: ExitCode, call: object, *args: object) -> str:
    with pytest.raises(MoetuneError) as info:
        call(*args)  # type: ignore[operator]
    assert info.value.exit_code == code, info.value
    assert "\n" not in info.value.message
    return info.value.message


def test_gated_repository(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    message = fails(ExitCode.HUB_AUTH, list_repo, ModelName("acme/gated-GGUF"))
    assert "gated" in message and "set HF_TOKEN" in message and "license" in message
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    assert "refused HF_TOKEN" in fails(ExitCode.HUB_AUTH, list_repo, ModelName("acme/gated-GGUF"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    listing = list_repo(ModelName("acme/gated-GGUF"))
    assert remote_model(listing, choose_quant(listing, None)).tensors


def test_not_found(hub: FakeHub) -> None:
    message = fails(ExitCode.FILE_NOT_FOUND, list_repo, ModelName("acme/nothing-here"))
    assert "acme/nothing-here" in message and "127.0.0.1" in message
    listing = list_repo(ModelName(REPO))
    message = fails(ExitCode.FILE_NOT_FOUND, choose_quant, listing, "Q2_K")
    assert "it has BF16, Q4_K_M, Q8_0" in message  # the tree's order
    gone = listing._replace(files=(RepoFile("gone-Q4_K_M.gguf", 1000),))
    message = fails(ExitCode.FILE_NOT_FOUND, remote_model, gone, choose_quant(gone, None))
    assert "gone-Q4_K_M.gguf" in message


def test_no_network(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_ENDPOINT", "http://127.0.0.1:9")
    assert "cannot reach 127.0.0.1:9" in fails(ExitCode.NETWORK, list_repo, ModelName(REPO))
    import httpx

    from moetune.hub import http

    monkeypatch.setattr(http, "TIMEOUT", httpx.Timeout(0.3))
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        monkeypatch.setenv("MODEL_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        assert "did not answer in time" in fails(ExitCode.NETWORK, list_repo, ModelName(REPO))


@pytest.mark.parametrize(
    ("option", "code", "words"),
    [
        ("ignore_range", ExitCode.NETWORK, "ignores Range requests"),
        ("redirect_loop", ExitCode.NETWORK, "redirect loop"),
        ("not_gguf", ExitCode.BAD_MODEL, "is not a GGUF file"),
    ],
)
def test_misbehaving_servers(hub: FakeHub, option: str, code: ExitCode, words: str) -> None:
    listing = list_repo(ModelName(REPO))
    quant = choose_quant(listing, None)
    setattr(hub, option, True)
    assert words in fails(code, remote_model, listing, quant)
    assert sum(hub.bytes_served.values()) <= 8 * MiB  # never the whole 17 GiB file


def test_token_stays_with_the_hub(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    listing = list_repo(ModelName(REPO))
    remote_model(listing, choose_quant(listing, None))
    url_model(ModelUrl(f"{hub.cdn}/cdn/{REPO}/Qwen3-30B-A3B-Q8_0.gguf"))  # the CDN's own URL
    assert all(s.authorization == f"Bearer {TOKEN}" for s in hub.requests("hub"))
    assert hub.requests("cdn") and all(s.authorization is None for s in hub.requests("cdn"))
    home = Path(os.environ["MOETUNE_HOME"])
    stored = [p for p in home.rglob("*") if p.is_file()]
    assert stored and not [p for p in stored if TOKEN.encode() in p.read_bytes()]
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err


def test_importing_the_hub_loads_no_network_stack() -> None:
    import subprocess

    code = "import sys, moetune.hub; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.split())
    assert not {m for m in loaded if m.startswith(("httpx", "moetune.store", "gguf", "numpy"))}


# --- bounds: pages, entries, sizes, damaged cache -------------------------------------------


def paged(hub: FakeHub, files: dict[str, Path], name: str) -> ModelName:
    """A repository of two files whose tree comes one entry a page."""
    two = {"a-Q8_0.gguf": files["tiny-F16.gguf"], "README.md": files["README.md"]}
    hub.add_repo(name, two, page_size=1)
    return ModelName(name)


def test_a_tree_in_pages_is_read_whole_and_bounded(
    hub: FakeHub, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moetune.hub import remote

    listing = list_repo(paged(hub, files, "acme/paged"))
    assert {f.path for f in listing.files} == {"a-Q8_0.gguf", "README.md"}
    assert len([s for s in hub.requests() if "/tree/" in s.path]) == 2  # one entry a page
    monkeypatch.setattr(remote, "MAX_PAGES", 1)
    message = fails(ExitCode.NETWORK, list_repo, paged(hub, files, "acme/paged-pages"))
    assert "lists the tree of acme/paged-pages in more than 1 pages" in message
    monkeypatch.setattr(remote, "MAX_PAGES", 100)
    monkeypatch.setattr(remote, "MAX_FILES", 1)
    message = fails(ExitCode.NETWORK, list_repo, paged(hub, files, "acme/paged-files"))
    assert "more than 1 entries" in message


def test_tree_sizes_are_sizes() -> None:
    from moetune.hub.remote import _tree_file

    for size in (True, -5, "12", 1.5, None):
        entry = {"type": "file", "path": "a.gguf", "size": size, "lfs": {"size": size}}
        assert _tree_file(entry) == RepoFile("a.gguf", 0)
    lfs_wrong = {"type": "file", "path": "a.gguf", "size": 7, "lfs": {"size": -1}}
    assert _tree_file(lfs_wrong) == RepoFile("a.gguf", 7)
    assert _tree_file({"type": "file", "path": "", "size": 7}) is None


def test_a_damaged_cache_is_asked_again(hub: FakeHub) -> None:
    import json

    from moetune.hub import cache

    listing = list_repo(ModelName(REPO))
    refs = cache.hub_cache_dir() / "refs" / f"{cache.repo_folder(REPO)}.json"
    stored = json.loads(refs.read_text())
    for checked in ("x", [1], 10**400, float("nan"), True):
        refs.write_text(json.dumps({**stored, "checked": checked}))
        hub.reset()
        assert list_repo(ModelName(REPO)) == listing
        assert [s.path for s in hub.requests()] == [f"/api/models/{REPO}/refs"]  # revalidated
    tree = cache.hub_cache_dir() / "listings" / cache.repo_folder(REPO) / f"{listing.commit}.json"
    for files in ([["a.gguf", -1, None]], [["a.gguf", 1, {"x": 1}]], [{"path": "a"}], [7]):
        tree.write_text(json.dumps({"files": files}))
        assert cache.load_listing(REPO, listing.commit) is None


def test_no_gguf_files_is_file_not_found(hub: FakeHub, files: dict[str, Path]) -> None:
    hub.add_repo("acme/bare", {"README.md": files["README.md"]})
    listing = list_repo(ModelName("acme/bare"))
    message = fails(ExitCode.FILE_NOT_FOUND, choose_quant, listing, None)
    assert message == "acme/bare has no GGUF model files (1 file(s), none a model .gguf)"


def test_an_error_names_twenty_quants_at_most() -> None:
    many = tuple(RepoFile(f"m-Q{i:03d}.gguf", 1) for i in range(50))
    message = fails(ExitCode.FILE_NOT_FOUND, choose_quant, RepoListing("a/b", "c" * 40, many), "X")
    assert "Q019, ... (50 in all)" in message and "Q020" not in message


def test_headers_are_read_ahead_a_few_at_a_time(hub: FakeHub) -> None:
    """``plan user/model`` reads the headers of the quants it will plan on a few threads, each
    quant once; the planning gets them in its order, the same models as read one by one."""
    from moetune.jobs.models import model_of_quant
    from moetune.jobs.plan import HEADER_READERS, _Opened

    name = ModelName(REPO)
    listing = list_repo(name)
    quants = listing.model_quants()
    assert len(quants) >= 3
    hub.reset()
    hub.misbehave["file"] = Misbehave(delay_s=0.2)  # each ranged read takes a while
    with _Opened(name, listing) as opened:
        opened.prefetch(quants)
        ahead = [opened.model(q) for q in quants]
        assert [opened.model(q) for q in quants] == ahead  # once each
    assert 2 <= hub.most_in_flight <= HEADER_READERS
    reads = [(s.path, s.range) for s in hub.requests("cdn", "GET")]
    assert len(set(reads)) == len(reads)  # no header read twice
    hub.reset()
    one_by_one = [model_of_quant(name, listing, q) for q in quants]  # from the cache now
    assert [m.facts for m in ahead] == [m.facts for m in one_by_one]
    assert not hub.requests("cdn")
