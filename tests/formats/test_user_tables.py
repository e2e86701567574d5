"""`neuroshard.formats.user_tables`: a user's table list (CSV or JSON)."""

import json

from neuroshard.formats.user_tables import read_user_tables
from neuroshard.types.tables import DEFAULT_BINS, TableConfig
from tests.formats import BINS, expect_error


def test_user_tables_from_json_with_and_without_bins(tmp_path, capsys):
    path = tmp_path / "tables.json"
    bins = {f"bin_{j}": 1.0 if j == 16 else 0.0 for j in range(17)}
    path.write_text(json.dumps([{"name": "a", "rows": 100, "dim": 8, "pooling_factor": 1.5, **bins},
                                {"name": "b-2", "rows": 10, "dim": 4, "pooling_factor": 0}]))
    user = read_user_tables(path, max_mem=1.0)
    assert user.names == ["a", "b-2"] and user.default_bins == ["b-2"]
    assert user.configs == [TableConfig(100, 1.5, BINS, 8), TableConfig(10, 0.0, DEFAULT_BINS, 4)]
    assert "1 table(s) without locality bins (b-2)" in capsys.readouterr().err
    read_user_tables(path, warn=False)
    assert capsys.readouterr().err == ""
    path.write_text(json.dumps([{"name": "a", "rows": 1.5, "dim": 8, "pooling_factor": 1}]))
    expect_error(lambda: read_user_tables(path), path, "table 0: table 'a': rows is not an integer: 1.5")
    path.write_text(json.dumps([{"name": "a", "rows": 10, "dim": 8, "pooling_factor": 1, "bin_0": 1.0}]))
    expect_error(lambda: read_user_tables(path), path, "give all of bin_0..bin_16 or none, missing bin_1")
    path.write_text("[]")
    expect_error(lambda: read_user_tables(path), path, "no tables")


def test_a_tables_kind_is_pooled_unless_it_says_sequence(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("name,rows,dim,pooling_factor,kind\na,100,8,1,\nb,100,8,2,sequence\nc,100,8,2,Pooled\n")
    assert [c.pooled for c in read_user_tables(path, warn=False).configs] == [True, False, True]
    path.write_text("name,rows,dim,pooling_factor,kind\na,100,8,1,bag\n")
    expect_error(lambda: read_user_tables(path), path, "table 'a': kind must be pooled or sequence, got 'bag'",
                 line=2)


def test_user_tables_csv_header_is_checked(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("name,rows,dims,pooling_factor\na,1,4,1\n")
    expect_error(lambda: read_user_tables(path), path, "missing dim", line=1)


def test_an_unknown_column_is_named_in_a_warning(tmp_path, capsys):
    """Issue 24: a misspelt optional column (here bin0 for bin_0) was dropped without a word."""
    path = tmp_path / "t.csv"
    path.write_text("name,rows,dim,pooling_factor,bin0,colour\na,100,8,1,0.5,red\n")
    user = read_user_tables(path)
    assert user.names == ["a"]
    err = capsys.readouterr().err
    assert "warning: " in err and "ignoring unknown column(s) 'bin0', 'colour'" in err
    path.write_text("name,rows,dim,pooling_factor\na,100,8,1\n")
    read_user_tables(path)
    assert "unknown column" not in capsys.readouterr().err
