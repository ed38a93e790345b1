"""The report's charts, drawn with matplotlib as inline SVG (no JavaScript, no network: a
report opens on an air-gapped cluster's login node as it does here). Each function takes
frames from the run and returns one ``<svg>`` element as text, or None when the run has
nothing to draw for it.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure

from pipeprof.analysis import views
from pipeprof.analysis.stats import VERDICT_THRESHOLDS_PCT

# One look for every chart: text as SVG text (smaller files, the browser's font), and a
# fixed hash salt so the same run renders to the same bytes.
STYLE = {
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "path.simplify": True,
    "figure.dpi": 96,
}
SYNTHETIC_COLOUR, IDEAL_COLOUR = "#555555", "#999999"
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
WAIT_COLOUR, COMPUTE_COLOUR = "#e45756", "#4c78a8"


def _svg(fig: Figure, name: str) -> str:
    buf = io.StringIO()
    with rc_context({**STYLE, "svg.hashsalt": f"pipeprof-{name}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _figure(width: float = 7.0, height: float = 3.2, cols: int = 1) -> tuple[Figure, list]:
    with rc_context(STYLE):
        fig = Figure(figsize=(width, height))
        axes = [fig.add_subplot(1, cols, i + 1) for i in range(cols)]
    return fig, axes


def _np_axis(ax, nps: list[int]) -> None:
    if len(nps) > 1 and max(nps) / min(nps) >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(nps)
    ax.set_xticklabels([str(n) for n in nps])
    ax.minorticks_off()
    ax.set_xlabel("workers (np)")


def gap_vs_np(summary: pd.DataFrame) -> str | None:
    real = views.real_rows(summary)
    real = real[real["gap_pct"].notna()] if not real.empty else real
    if real.empty:
        return None
    with rc_context(STYLE):
        fig, (ax,) = _figure()
        nps = sorted(int(n) for n in real["np"].unique())
        for i, (variant, rows) in enumerate(real.groupby("variant", sort=False)):
            rows = rows.sort_values("np")
            err = rows["gap_pct_ci95"].fillna(0.0).to_numpy(float)
            ax.errorbar(
                rows["np"],
                rows["gap_pct"],
                yerr=err,
                marker="o",
                capsize=4,
                color=PALETTE[i % 8],
                label=f"{variant} (95% interval)",
            )
        low, high = VERDICT_THRESHOLDS_PCT
        ax.axhline(low, color="#e9a100", ls="--", lw=1)
        ax.axhline(high, color="#c0392b", ls="--", lw=1)
        ax.text(
            1.0,
            low,
            f" {low:g}%: moderately input-bound",
            transform=ax.get_yaxis_transform(),
            va="bottom",
            ha="right",
            fontsize=8,
            color="#9a6a00",
        )
        ax.text(
            1.0,
            high,
            f" {high:g}%: highly input-bound",
            transform=ax.get_yaxis_transform(),
            va="bottom",
            ha="right",
            fontsize=8,
            color="#c0392b",
        )
        top = float((real["gap_pct"] + real["gap_pct_ci95"].fillna(0)).max())
        bottom = float((real["gap_pct"] - real["gap_pct_ci95"].fillna(0)).min())
        ax.set_ylim(min(0.0, bottom) - 2, max(top, high) + 5)
        _np_axis(ax, nps)
        ax.set_ylabel("gap to synthetic (%)")
        ax.set_title("Synthetic-vs-real gap by worker count")
        ax.legend(loc="upper left", fontsize=8, frameon=False)
        return _svg(fig, "gap")


def throughput_vs_np(summary: pd.DataFrame) -> str | None:
    synth, real = views.synthetic_rows(summary), views.real_rows(summary)
    if synth.empty and real.empty:
        return None
    with rc_context(STYLE):
        fig, (ax, eff) = _figure(width=9.0, cols=2)
        rows = pd.concat([synth, real])
        nps = sorted(int(n) for n in rows["np"].unique())
        series = [("synthetic", synth, SYNTHETIC_COLOUR)] + [
            (v, r, PALETTE[i % 8]) for i, (v, r) in enumerate(real.groupby("variant", sort=False))
        ]
        for name, r, colour in series:
            if r.empty:
                continue
            r = r.sort_values("np")
            ax.errorbar(
                r["np"],
                r["samples_per_s"],
                yerr=r["samples_per_s_ci95"].fillna(0.0),
                marker="o",
                capsize=3,
                color=colour,
                label=name,
            )
            eff.plot(r["np"], r["scaling_efficiency_pct"], marker="o", color=colour, label=name)
        base = synth[synth["np"] == 1]
        if not base.empty and len(nps) > 1:
            one = float(base.iloc[0]["samples_per_s"])
            ax.plot(
                nps,
                [one * n for n in nps],
                ls=":",
                color=IDEAL_COLOUR,
                label="ideal (synthetic np=1 × np)",
            )
        _np_axis(ax, nps)
        _np_axis(eff, nps)
        ax.set_ylabel("samples/s (all workers)")
        ax.set_title("Throughput")
        ax.legend(fontsize=8, frameon=False)
        eff.axhline(100, color=IDEAL_COLOUR, ls=":", lw=1)
        eff.set_ylabel("scaling efficiency (%)")
        eff.set_ylim(bottom=0)
        eff.set_title("Scaling efficiency: throughput ÷ (np × np=1's)")
        return _svg(fig, "throughput")


def rank_split(splits: list[tuple[int, str, pd.DataFrame]]) -> str | None:
    """Stacked bars per rank (input wait, the rest), one panel per (np, variant)."""
    splits = [s for s in splits if not s[2].empty]
    if not splits:
        return None
    with rc_context(STYLE):
        cols = min(len(splits), 3)
        rows_n = math.ceil(len(splits) / cols)
        fig = Figure(figsize=(3.4 * cols, 2.6 * rows_n))
        for i, (np_, variant, split) in enumerate(splits):
            ax = fig.add_subplot(rows_n, cols, i + 1)
            ranks = split["rank"].to_numpy()
            ax.bar(ranks, split["compute_ms"], color=COMPUTE_COLOUR, label="compute + allreduce")
            ax.bar(
                ranks,
                split["input_wait_ms"],
                bottom=split["compute_ms"],
                color=WAIT_COLOUR,
                label="input wait",
            )
            slow = views.straggler(split)
            title = f"np={np_} · {variant}"
            if slow is not None:
                ax.annotate(
                    "straggler",
                    (slow, float(split.set_index("rank").loc[slow, "step_ms"])),
                    xytext=(0, 6),
                    textcoords="offset points",
                    ha="center",
                    fontsize=8,
                    color=WAIT_COLOUR,
                )
                title += f" · rank {slow} waits most"
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("rank")
            ax.set_ylabel("ms per step")
            if len(ranks) <= 16:
                ax.set_xticks(ranks)
            if i == 0:
                ax.legend(fontsize=7, frameon=False, loc="lower left")
        fig.tight_layout()
        return _svg(fig, "ranks")


def step_heatmap(grid: pd.DataFrame, np_: int, variant: str) -> str | None:
    """Input wait per rank over the run (rank × time): a rank that waits stands out as a band."""
    if grid.empty:
        return None
    with rc_context(STYLE):
        ranks = sorted(grid["rank"].unique())
        bins = int(grid["bin"].max()) + 1
        values = np.full((len(ranks), bins), np.nan)
        pos = {r: i for i, r in enumerate(ranks)}
        for r, b, v in zip(grid["rank"], grid["bin"], grid["input_wait_ms"]):
            values[pos[r], int(b)] = v
        span = float(grid["t_s"].max() + grid["t_s"].min())
        fig, (ax,) = _figure(width=9.0, height=max(1.8, 0.18 * len(ranks) + 1.2))
        ax.grid(False)
        im = ax.imshow(
            values,
            aspect="auto",
            cmap="magma_r",
            interpolation="nearest",
            extent=(0, span, len(ranks) - 0.5, -0.5),
        )
        ax.set_yticks(range(len(ranks)) if len(ranks) <= 32 else range(0, len(ranks), 4))
        ax.set_yticklabels(
            [
                str(ranks[i])
                for i in (range(len(ranks)) if len(ranks) <= 32 else range(0, len(ranks), 4))
            ]
        )
        ax.set_ylabel("rank")
        ax.set_xlabel("seconds into the variant's measurement")
        ax.set_title(f"Input wait per rank over time · np={np_} · {variant}")
        fig.colorbar(im, ax=ax, label="input wait (ms per step)", fraction=0.03, pad=0.01)
        return _svg(fig, "heatmap")


def telemetry_over_time(
    gpu: pd.DataFrame | None, host: pd.DataFrame | None, spans: pd.DataFrame, t0: float
) -> str | None:
    has_gpu = gpu is not None and not gpu.empty and gpu["gpu_util_pct"].notna().any()
    has_host = host is not None and not host.empty
    if not (has_gpu or has_host):
        return None
    with rc_context(STYLE):
        panels = [p for p, ok in (("gpu", has_gpu), ("host", has_host)) if ok]
        fig = Figure(figsize=(9.0, 2.4 * len(panels)))
        axes = [fig.add_subplot(len(panels), 1, i + 1) for i in range(len(panels))]
        for ax, panel in zip(axes, panels):
            if panel == "gpu":
                assert gpu is not None  # has_gpu
                for i, ((h, g), s) in enumerate(gpu.groupby(["host", "gpu"], sort=True)):
                    s = views.downsample(s.dropna(subset=["gpu_util_pct"]), "t_unix_s")
                    ax.plot(
                        s["t_unix_s"] - t0,
                        s["gpu_util_pct"],
                        lw=1,
                        color=PALETTE[i % 8],
                        label=f"{h} GPU {g}",
                    )
                ax.set_ylabel("GPU utilisation (%)")
                ax.set_title("GPU utilisation (NVML)")
            else:
                assert host is not None  # has_host
                for i, (h, s) in enumerate(host.groupby("host", sort=True)):
                    s = views.downsample(s, "t_unix_s")
                    ax.plot(s["t_unix_s"] - t0, s["cpu_pct"], lw=1, color=PALETTE[i % 8], label=h)
                ax.set_ylabel("host CPU (%)")
                ax.set_title("Host CPU, all cores")
            ax.set_ylim(0, 105)
            for k, span in enumerate(spans.itertuples()):
                if k % 2 == 0:
                    ax.axvspan(span.start - t0, span.end - t0, color="#000000", alpha=0.04, lw=0)
                if panel == panels[0]:
                    ax.text(
                        (span.start + span.end) / 2 - t0,
                        103,
                        f"np{span.np} {span.variant}",
                        fontsize=6,
                        ha="center",
                        va="top",
                        rotation=90,
                        color="#666666",
                    )
            ax.legend(fontsize=7, frameon=False, loc="lower left", ncol=4)
        axes[-1].set_xlabel("seconds into the run")
        fig.tight_layout()
        return _svg(fig, "telemetry")


def ablation(summary: pd.DataFrame, stages: pd.DataFrame | None) -> str | None:
    ladder = (
        summary[summary["stage_marginal_ms"].notna()]
        if "stage_marginal_ms" in summary
        else summary.iloc[0:0]
    )
    has_stages = stages is not None and not stages.empty
    if ladder.empty and not has_stages:
        return None
    with rc_context(STYLE):
        panels = int(not ladder.empty) + int(has_stages)
        fig, axes = _figure(width=4.6 * panels, height=3.0, cols=panels)
        k = 0
        if not ladder.empty:
            ax = axes[k]
            k += 1
            nps = sorted(int(n) for n in ladder["np"].unique())
            width = 0.8 / len(nps)
            rungs = list(dict.fromkeys(ladder["variant"]))
            for i, n in enumerate(nps):
                r = ladder[ladder["np"] == n].set_index("variant").reindex(rungs)
                ax.bar(
                    np.arange(len(rungs)) + i * width,
                    r["stage_marginal_ms"],
                    width=width,
                    color=PALETTE[i % 8],
                    label=f"np={n}",
                )
            ax.axhline(0, color="#333333", lw=0.8)
            ax.set_xticks(np.arange(len(rungs)) + width * (len(nps) - 1) / 2)
            ax.set_xticklabels(rungs, rotation=30, ha="right")
            ax.set_ylabel("ms per step added")
            ax.set_title("The ablation ladder: what each stage adds to a step")
            ax.legend(fontsize=7, frameon=False)
        if has_stages:
            assert stages is not None  # has_stages
            ax = axes[k]
            ax.bar(stages["stage"], stages["marginal_core_ms_1"], color=COMPUTE_COLOUR)
            ax.set_ylabel("core-ms per sample")
            ax.set_title(f"Each stage alone: CPU cost ({int(stages['cores'].iloc[0])} core(s))")
        return _svg(fig, "ablation")


def prediction(pred: pd.DataFrame) -> str | None:
    if pred is None or pred.empty:
        return None
    with rc_context(STYLE):
        fig, (ax,) = _figure()
        nps = [int(n) for n in pred["np"]]
        ax.plot(nps, pred["gap_pct"], marker="o", color=PALETTE[1], label="predicted gap")
        for n, g, d in zip(nps, pred["gap_pct"], pred["dominant"]):
            ax.annotate(
                str(d), (n, g), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=7
            )
        low, high = VERDICT_THRESHOLDS_PCT
        ax.axhline(low, color="#e9a100", ls="--", lw=1)
        ax.axhline(high, color="#c0392b", ls="--", lw=1)
        _np_axis(ax, nps)
        ax.set_ylabel("predicted gap (%)")
        ax.set_ylim(
            bottom=min(0.0, float(pred["gap_pct"].min()) - 2),
            top=max(high, float(pred["gap_pct"].max())) + 8,
        )
        ax.set_title("predict: the gap on the target, labelled with the term it comes from")
        return _svg(fig, "predict")


def tune_trials(trials: pd.DataFrame) -> str | None:
    if trials is None or trials.empty or "samples_per_s" not in trials:
        return None
    with rc_context(STYLE):
        fig, (ax,) = _figure(width=9.0)
        ok = trials[trials.get("error", pd.Series("", index=trials.index)).fillna("") == ""]
        for i, (phase, rows) in enumerate(ok.groupby("phase", sort=False)):
            ax.scatter(
                rows.index + 1, rows["samples_per_s"], s=18, color=PALETTE[i % 8], label=phase
            )
        if "cache" in ok:
            cached = ok[ok["cache"].astype(str) != "off"]
            ax.scatter(
                cached.index + 1,
                cached["samples_per_s"],
                s=60,
                facecolors="none",
                edgecolors="#333333",
                lw=0.6,
                label="cache on",
            )
        ax.set_xlabel("trial")
        ax.set_ylabel("samples/s (pipeline only)")
        ax.set_title("tune: every trial, in order")
        ax.legend(fontsize=7, frameon=False, ncol=5)
        return _svg(fig, "tune")
