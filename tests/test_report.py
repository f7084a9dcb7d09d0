"""Comparison tables: mean over seeds, 'n/a' for not applicable, '—' for not evaluated, the longest/L ratio."""

import pandas as pd

from pe_bench.report import comparison, write_tables


def rows():
    def row(scheme, n, ppl, seed=0, status="ok"):
        return {"run": f"{scheme}-{seed}", "scheme": scheme, "L_train": 64, "L_eval": n, "mode": "nonoverlapping",
                "split": "validation", "stride": n, "ppl": ppl, "seed": seed, "status": status, "tokens_scored": 100}

    return pd.DataFrame([
        row("alibi", 64, 10.0), row("alibi", 512, 9.0), row("alibi", 64, 12.0, seed=1), row("alibi", 512, 11.0, seed=1),
        row("learned", 64, 10.0), row("learned", 512, float("nan"), status="not_applicable"),
        row("rope", 64, 8.0),  # never evaluated at 512
    ])


def test_comparison_means_over_seeds_and_marks_missing_cells():
    t = comparison(rows(), "nonoverlapping")
    assert list(t.columns) == ["64", "512", "longest/L", "seeds"]
    assert t.loc[("alibi", 64)].tolist() == [11.0, 10.0, round(10 / 11, 3), 2]
    assert t.loc[("learned", 64), "512"] == "n/a" and t.loc[("learned", 64), "longest/L"] == "n/a"
    assert t.loc[("rope", 64), "512"] == "—"
    assert comparison(rows(), "sliding").empty
    assert comparison(rows(), "nonoverlapping", split="test").empty


def test_tables_are_written_deterministically(tmp_path):
    a = write_tables(rows(), tmp_path / "a", "t")
    b = write_tables(rows(), tmp_path / "b", "t")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert "| learned | 64 | 10.0 | n/a | n/a | 1 |" in (tmp_path / "a" / "comparison.md").read_text()
