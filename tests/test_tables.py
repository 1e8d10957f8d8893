"""The AdjudicatedTable's validating reader: one clear error naming the row, the column and the rubric's range."""

from __future__ import annotations

import pandas as pd
import pytest

from rubrictool.errors import DataError
from rubrictool.rubric import load_rubric
from rubrictool.tables import validate_adjudicated
from tests.support.tiny_models import KEYS, mohler_like_table


def test_a_valid_table_gets_zero_based_columns() -> None:
    rb = load_rubric("mohler")
    df = mohler_like_table(10)
    out = validate_adjudicated(df, rb)
    assert (out["_y"] == df["grade"] - rb.grade.min).all()
    for k in KEYS:
        assert (out[f"_c_{k}"] == df[k] - rb.scale.min).all()


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.assign(FC=d["FC"].where(d.index != 3, 7)),
     "row 4 (id q.3): concept FC = 7 is not a level of the rubric (1..3)"),
    (lambda d: d.drop(columns=["EE"]), "no column for concept(s) EE of rubric 'mohler'"),
    (lambda d: d.assign(grade=d["grade"].astype(float).where(d.index != 0, 2.5)),
     "row 1 (id q.0): grade 2.5 is outside"),
    (lambda d: d.drop(columns=["grade"]), "has no 'grade' column"),
    (lambda d: pd.concat([d, d.iloc[[2]]]), "duplicate id"),
])
def test_bad_tables_name_the_row_and_the_fix(change: object, message: str) -> None:
    with pytest.raises(DataError) as err:
        validate_adjudicated(change(mohler_like_table(10)), load_rubric("mohler"))  # type: ignore[operator]
    assert message in str(err.value)
