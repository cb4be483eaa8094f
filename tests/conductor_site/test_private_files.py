import os
import stat

import pytest

from conductor_site.private_files import private_file, private_folder, private_sqlite_database


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_folder_is_private_and_an_open_one_is_narrowed(tmp_path):
    private_folder(tmp_path / "new" / "data")
    assert mode(tmp_path / "new" / "data") == 0o700
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o775)
    private_folder(tmp_path / "open")
    assert mode(tmp_path / "open") == 0o700


def test_a_shared_sticky_folder_is_left_as_it_is(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    private_folder(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_file_is_created_private_and_an_open_one_is_narrowed_keeping_its_content(tmp_path):
    private_file(tmp_path / "new")
    assert mode(tmp_path / "new") == 0o600 and (tmp_path / "new").read_bytes() == b""
    (tmp_path / "old").write_text("kept")
    (tmp_path / "old").chmod(0o664)
    private_file(tmp_path / "old")
    assert mode(tmp_path / "old") == 0o600 and (tmp_path / "old").read_text() == "kept"


def test_a_sqlite_database_and_its_companions_are_narrowed(tmp_path):
    for name in ("db.sqlite3-wal", "db.sqlite3-shm"):
        (tmp_path / name).touch(mode=0o644)
    private_sqlite_database(str(tmp_path / "db.sqlite3"))
    assert {name: mode(tmp_path / name) for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm")} == {
        "db.sqlite3": 0o600, "db.sqlite3-wal": 0o600, "db.sqlite3-shm": 0o600,
    }


@pytest.mark.parametrize("name", [":memory:", "file:memdb?mode=memory&cache=shared", "", "missing/db.sqlite3"])
def test_databases_that_are_not_files_in_an_existing_folder_are_left_alone(tmp_path, name, monkeypatch):
    monkeypatch.chdir(tmp_path)
    private_sqlite_database(name)
    assert list(tmp_path.iterdir()) == []
