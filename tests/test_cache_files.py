"""What einslice loads from its cache directory, when someone else wrote there.

Code (the native kernel's library, JAX's compiled programs) is loaded only
from a directory this user owns and no one else can write; a planted library
(here one whose constructor leaves a mark when it is loaded) is never loaded,
and the kernel is built privately instead. Data (wisdom, searched trees,
profiles) is JSON, read with checks: a corrupt or hostile file is ignored
with a ``CacheWarning``, never a crash or a hang.

einslice may run as root here, who owns whatever a test plants: files are
made another user's by replacing ``_cachedir.owner_uid``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import jax
import pytest

import einslice
from einslice._exec import _calibrate, _native
from einslice._plan import _cachedir, _search, _wisdom
from einslice._plan._cachedir import CacheWarning, cache_dir

COMPILER = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler")


@pytest.fixture
def fresh(monkeypatch):
    """The native module as in a fresh process, restored afterwards."""
    _native._forget()
    monkeypatch.setattr(_native, "_distrusted_warned", set())
    yield
    _native._forget()


def _plant(library: Path, mark: Path) -> None:
    """A shared library at ``library`` that creates ``mark`` when it is loaded."""
    source = library.with_suffix(".c")
    source.write_text(
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void planted(void) {\n"
        f'  int fd = open("{mark}", O_CREAT | O_WRONLY, 0600);\n'
        "  if (fd >= 0) close(fd);\n}\n"
    )
    assert COMPILER is not None
    subprocess.run(
        [COMPILER, "-x", "c", "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    source.unlink()


def _cached_library() -> Path:
    library, reason = _native._located(cache_dir())
    assert library is not None, reason
    return library


@needs_compiler
def test_a_planted_library_in_a_group_writable_file_is_never_loaded(tmp_path, fresh):
    mark = tmp_path / "loaded"
    library = _cached_library()
    library.parent.mkdir(parents=True, mode=0o700)
    _plant(library, mark)
    library.chmod(0o775)
    loaded, reason = _native._load(library)
    assert loaded is None and "writable by its group" in reason
    with pytest.warns(CacheWarning, match="writable by its group") as caught:
        found, reason = _native._library()
    assert len(caught) == 1  # one warning, naming the fix
    assert "chmod 700" in str(caught[0].message)
    # built instead in a private directory, which is checked and loaded
    assert found is not None and found.exists(), reason
    assert found.parent != library.parent
    assert (found.parent.stat().st_mode & 0o777) == 0o700
    loaded, reason = _native._load(found)
    assert loaded is not None, reason
    assert hasattr(loaded, "EinsliceMaxPlusHost")
    assert not mark.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process
        assert _native._library() == (found, "")


@needs_compiler
@pytest.mark.parametrize("mode", [0o770, 0o777, 0o757])
def test_a_group_or_world_writable_directory_is_refused(tmp_path, fresh, mode):
    mark = tmp_path / "loaded"
    library = _cached_library()
    library.parent.mkdir(parents=True)
    _plant(library, mark)
    library.chmod(0o755)
    library.parent.chmod(mode)
    who = "its group" if mode & 0o020 else "others"
    assert who in _native._distrusted(library)
    loaded, reason = _native._load(library)
    assert loaded is None and who in reason
    assert not mark.exists()


@needs_compiler
def test_a_library_of_another_user_is_refused(tmp_path, fresh, monkeypatch):
    mark = tmp_path / "loaded"
    library = _cached_library()
    library.parent.mkdir(parents=True, mode=0o700)
    _plant(library, mark)
    library.chmod(0o755)
    mine = os.stat(library).st_uid
    monkeypatch.setattr(_cachedir, "owner_uid", lambda: mine + 1)
    assert f"belongs to uid {mine}" in _native._distrusted(library)
    loaded, reason = _native._load(library)
    assert loaded is None and f"belongs to uid {mine}" in reason
    assert not mark.exists()
    # as its owner, the same checks pass: what decides is who owns it
    monkeypatch.setattr(_cachedir, "owner_uid", lambda: mine)
    assert _native._distrusted(library) == ""


@needs_compiler
def test_a_symbolic_link_is_not_followed(tmp_path, fresh):
    mark = tmp_path / "loaded"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    library = _cached_library()
    _plant(elsewhere / library.name, mark)
    library.parent.parent.mkdir(parents=True, exist_ok=True)
    library.parent.symlink_to(elsewhere)  # kernels/ -> a directory of theirs
    assert "symbolic link" in _native._distrusted(library)
    loaded, _ = _native._load(library)
    assert loaded is None
    assert not mark.exists()


def test_a_built_library_and_its_directory_are_private_whatever_the_umask(fresh):
    if _native._located(cache_dir())[0] is None:
        pytest.skip("no C++ compiler")
    before = os.umask(0o002)  # a user-private-group umask: group-writable files
    try:
        library, reason = _native._library()
    finally:
        os.umask(before)
    assert library is not None, reason
    assert library.parent == cache_dir() / "kernels"
    assert library.parent.stat().st_mode & 0o777 == 0o700
    assert library.stat().st_mode & 0o022 == 0
    assert _native._distrusted(library) == ""


def test_the_compilation_cache_stays_off_in_a_directory_others_can_write():
    before = getattr(jax.config, "jax_compilation_cache_dir", None)
    xla = cache_dir() / "xla"
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        xla.mkdir(parents=True)
        xla.chmod(0o777)
        with pytest.warns(CacheWarning, match="writable by its group and others"):
            assert einslice.enable_compilation_cache() is None
        assert not getattr(jax.config, "jax_compilation_cache_dir", None)
        xla.chmod(0o700)
        assert einslice.enable_compilation_cache() == str(xla)
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


# -- data: JSON only, a corrupt or hostile file is ignored with a warning -------

HOSTILE = {
    "nested": b"[" * 100_000 + b"]" * 100_000,  # RecursionError in json.loads
    "not UTF-8": b"\xff\xfe\x00{",
    "NaN": b'{"format": NaN, "path": NaN}',
    "a huge int": b"1" * 100_000,  # ValueError past Python's 4300 digits
}


def _readers(directory: Path):
    """(name, path of the file, read it) for each kind of data in the cache."""

    def tree():
        return _search._load(directory / "tree.json", 3, 3)

    def profile():
        _calibrate._load.cache_clear()
        return _calibrate._load(directory, "cpu", "cpu")

    return [
        (
            "wisdom",
            directory / "wisdom.json",
            lambda: _wisdom._load(directory / "wisdom.json"),
        ),
        ("tree", directory / "tree.json", tree),
        ("profile", _calibrate.profile_path("cpu"), profile),
    ]


@pytest.mark.parametrize("payload", HOSTILE, ids=list(HOSTILE))
def test_a_hostile_data_file_is_ignored_with_a_warning(payload):
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    for _name, path, read in _readers(directory):
        path.write_bytes(HOSTILE[payload])
        with pytest.warns(CacheWarning):
            read()  # no exception: the reader carries on without it
        path.unlink()
    _calibrate._load.cache_clear()


def test_a_fifo_in_place_of_a_data_file_does_not_block():
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    for _name, path, read in _readers(directory):
        os.mkfifo(path)
        with pytest.warns(CacheWarning):
            read()
        path.unlink()
    _calibrate._load.cache_clear()


def test_nothing_in_the_package_unpickles():
    # data from the cache directory is JSON: no module of the package imports
    # a deserializer of code (pickle and its kin) or calls numpy's load
    unsafe = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
    # ... but for growth's search process (_exec/_apart.py): its pickles go
    # only through the pipes between this process and the child it starts,
    # never through a file, so no one else can write what either side loads
    piped = Path(einslice.__file__).parent / "_exec" / "_apart.py"
    source = piped.read_text()
    assert not re.search(r"(?<![\w.])open\(|read_bytes|\.load\(f", source)  # no file
    assert source.count("pickle.loads(") == 1 and "pickle.load(sys.stdin" in source
    for module in Path(einslice.__file__).parent.rglob("*.py"):
        if module == piped:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Attribute) and node.attr == "load":
                names = {f"{getattr(node.value, 'id', '')}.load"}
            else:
                continue
            assert not names & (unsafe | {"np.load", "numpy.load"}), (module, names)
