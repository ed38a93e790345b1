"""The ablation ladder's arithmetic: each rung's marginal step time and share of the gap."""

import math

import pandas as pd
import pytest

from pipeprof.analysis.ablation import add_stage_costs


def summary(rows):
    return pd.DataFrame(rows, columns=["np", "variant", "step_time_ms_mean", "warning"])


def test_each_rung_gets_its_marginal_step_time_and_share_of_the_reference_gap():
    out = add_stage_costs(
        summary(
            [
                (1, "synthetic", 100.0, ""),
                (1, "read", 104.0, "too wide"),
                (1, "+label", 105.0, "too wide"),
                (1, "+augment", 118.0, ""),
                (1, "real", 120.0, "too wide: raise train.max_measure_s"),
            ]
        ),
        reference="real",
    ).set_index("variant")
    assert out.loc["read", "stage_marginal_ms"] == pytest.approx(4.0)
    assert out.loc["+label", "stage_marginal_ms"] == pytest.approx(1.0)
    assert out.loc["+augment", "stage_marginal_ms"] == pytest.approx(13.0)
    assert out.loc["+augment", "stage_pct_of_gap"] == pytest.approx(
        65.0
    )  # 13 of the real variant's 20 ms
    assert math.isnan(out.loc["real", "stage_marginal_ms"]) and math.isnan(
        out.loc["synthetic", "stage_pct_of_gap"]
    )


def test_rungs_warn_of_nothing_but_the_real_variant_keeps_its_warning():
    out = add_stage_costs(
        summary(
            [
                (1, "synthetic", 100.0, ""),
                (1, "read", 104.0, "too wide"),
                (1, "real", 120.0, "too wide: raise it"),
            ]
        ),
        reference="real",
    ).set_index("variant")
    assert out.loc["read", "warning"] == ""
    assert out.loc["real", "warning"] == "too wide: raise it"


def test_no_share_without_a_positive_gap_and_no_costs_without_a_synthetic_row():
    out = add_stage_costs(
        summary(
            [
                (1, "synthetic", 100.0, ""),
                (1, "read", 99.0, ""),
                (1, "real", 98.0, ""),
                (2, "read", 50.0, ""),
                (2, "real", 60.0, ""),
            ]
        ),
        reference="real",
    )
    assert out["stage_pct_of_gap"].isna().all()
    assert out[(out["np"] == 1) & (out["variant"] == "read")]["stage_marginal_ms"].iloc[
        0
    ] == pytest.approx(-1.0)
    assert out[out["np"] == 2]["stage_marginal_ms"].isna().all()
