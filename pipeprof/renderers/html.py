"""``report.html``: one self-contained file a team can open and pass around. The verdict in
words first, then the charts (inline SVG: no script, no stylesheet, no font from the
network), the tables, and the manifest folded at the bottom. Sections appear for what the
run measured: the ablation's, predict's and tune's only where they ran.
"""

from __future__ import annotations

import html
import json
import math
import numbers
import time
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof import __version__, atomic
from pipeprof.analysis import views
from pipeprof.renderers import plots
from pipeprof.rundir import Run

FILE = "report.html"
MOST_RANK_PANELS = 6  # the per-rank bars of this many worker counts at most (the largest)

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0 auto;max-width:1100px;
padding:1.5em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:.9em} .partial{background:#fff4e5;border:1px solid #f0a020;padding:.6em 1em;margin:1em 0}
.verdicts li{margin:.3em 0} .bound{color:#b03020;font-weight:600} .notbound{color:#2a7a2a;font-weight:600}
.moderate{color:#9a6a00;font-weight:600} .warn{color:#9a6a00;font-size:.9em}
figure.chart{margin:1em 0} figure.chart svg{max-width:100%;height:auto} figcaption{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right}
th{background:#f5f5f5} td.l,th.l{text-align:left} details pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em}
.advice{color:#225;margin-left:1em} .wide{overflow-x:auto;max-width:100%}
"""

VERDICT_CLASS = {
    "not input-bound": "notbound",
    "moderately input-bound": "moderate",
    "highly input-bound": "bound",
    "on the 5% line": "moderate",
    "on the 20% line": "moderate",
}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: object, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return f"{value:,.{digits}f}"
    return esc(value)


def table(
    frame: pd.DataFrame,
    columns: list[str] | None = None,
    digits: dict[str, int] | None = None,
    left: tuple[str, ...] = (
        "variant",
        "stage",
        "dominant",
        "advice",
        "phase",
        "stop",
        "warning",
        "verdict",
        "device",
        "error",
        "straggler",
    ),
) -> str:
    cols = [c for c in (columns or list(frame.columns)) if c in frame.columns]
    digits = digits or {}
    head = "".join(f'<th class="{"l" if c in left else ""}">{esc(c)}</th>' for c in cols)
    ints = {c for c in cols if pd.api.types.is_integer_dtype(frame[c])}
    body = []
    for values in frame[cols].itertuples(index=False, name=None):
        cells = []
        for c, v in zip(cols, values):
            if (
                isinstance(v, bool)
                or v is None
                or (isinstance(v, float) and math.isnan(v))
                or isinstance(v, str)
            ):
                text = esc("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
            else:
                text = _num(v, 0 if c in ints else digits.get(c, 1))
            cells.append(f'<td class="{"l" if c in left else ""}">{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def figure(chart_id: str, svg: str | None, caption: str) -> str:
    if svg is None:
        return ""
    return f'<figure class="chart" id="chart-{chart_id}">{svg}<figcaption>{esc(caption)}</figcaption></figure>'


def _partial_banner(run: Run) -> str:
    if not run.partial:
        return ""
    state: Any = run.status.get("state")  # a str, as a rule
    why = {
        "running": "the run is still in progress",
        "stopped": "the run's process ended before it finished",
        "failed": "the run failed",
        "interrupted": "the run was interrupted",
    }.get(state, state)
    detail = run.status.get("detail") or ""
    return (
        f'<div class="partial" id="partial"><b>Partial report</b>: {esc(why)}'
        f'{": " + esc(detail) if detail else ""}. It shows what was measured until it was rendered; '
        f"run <code>pipeprof report {esc(run.path)}</code> again once the run has ended.</div>"
    )


def _verdicts(run: Run) -> str:
    summary = run.summary
    items = []
    if summary is not None and not summary.empty:
        real = views.real_rows(summary)
        synth = views.synthetic_rows(summary).set_index("np")
        for _, r in real.iterrows():
            n = int(r["np"])
            verdict = r["verdict"] if isinstance(r["verdict"], str) else ""
            cls = VERDICT_CLASS.get(verdict, "")
            if math.isnan(r["gap_pct"]):
                what = f"{_num(r['samples_per_s'])} samples/s"
            else:
                # the ceiling the gap was taken against: the twin measured beside the row, if it was
                twin = r.get("twin_samples_per_s", math.nan)
                ceiling = (
                    twin
                    if not math.isnan(twin)
                    else synth.loc[n, "samples_per_s"]
                    if n in synth.index
                    else twin
                )
                what = (
                    f"gap {r['gap_pct']:.1f}% ±{_num(r['gap_pct_ci95'])}: {_num(r['samples_per_s'])} samples/s "
                    f"against a ceiling of {_num(ceiling)} on synthetic data"
                )
            line = f'<li><b>np={n} · {esc(r["variant"])}</b>: <span class="{cls}">{esc(verdict or "no verdict")}</span>, {what}'
            if isinstance(r.get("warning"), str) and r["warning"]:
                line += f'<div class="warn">warning: {esc(r["warning"])}</div>'
            for key in ("ceiling_note", "remedy_note"):
                if isinstance(r.get(key), str) and r[key]:
                    line += f'<div class="warn">note: {esc(r[key])}</div>'
            items.append(line + "</li>")
    for v in run.verdicts:
        text = v.get("text") or []
        if not text:
            continue
        advice = "".join(f'<div class="advice">→ {esc(a)}</div>' for a in v.get("advice") or [])
        cls = "bound" if v.get("input_bound") else "notbound"
        items.append(
            f'<li><b>np={v.get("np")} · which stage</b>: <span class="{cls}">{esc(text[0])}</span>'
            + "".join(f"<div>{esc(t)}</div>" for t in text[1:])
            + advice
            + "</li>"
        )
    if not items:
        return ""
    return f'<section id="verdicts"><h2>Verdict</h2><ul class="verdicts">{"".join(items)}</ul></section>'


def _rank_section(run: Run) -> str:
    summary = run.summary
    if summary is None or summary.empty or run.steps.empty:
        return ""
    reference = views.reference_variant(summary)
    if reference is None:
        return ""
    nps = sorted(int(n) for n in summary["np"].unique())[-MOST_RANK_PANELS:]
    splits = [(n, reference, views.rank_split(run.steps, n, reference)) for n in nps]
    largest = nps[-1]
    grid = views.binned_steps(run.steps, largest, reference)
    bars = figure(
        "ranks",
        plots.rank_split(splits),
        "Each rank's mean step, split into input wait (red) and the rest (compute, allreduce, update). "
        "In lock-step every rank's step lasts as long as the slowest's: the rank that waits longest on "
        "its input holds the others in the allreduce.",
    )
    heat = figure(
        "rank-timeline",
        plots.step_heatmap(grid, largest, reference),
        f"Input wait of every rank over the measurement at np={largest}: a straggling rank is a dark band.",
    )
    if not bars and not heat:
        return ""
    return f'<section id="ranks"><h2>Ranks: where the step time goes</h2>{bars}{heat}</section>'


def _against_section(run: Run) -> str:
    """``report --against BEFORE``: what changed since that run (``pipeprof diff``'s rows)."""
    if run.against is None or run.summary is None:
        return ""
    from pipeprof.analysis.diff import diff

    before, frame = run.against
    rows = diff(frame, run.summary)
    cols = ["np", "variant", "samples_per_s_before", "samples_per_s_after"]
    cols += ["samples_per_s_change_pct", "samples_per_s_change_ci95", "samples_per_s_call"]
    cols += ["gap_before_pct", "gap_after_pct", "gap_change_points", "gap_change_ci95", "gap_call"]
    return (
        f'<section id="against"><h2>Against {esc(before)}</h2><p class="meta">each change with '
        "its 95% interval (the two runs' added in quadrature), and the call that interval "
        "supports; rows both runs measured</p>"
        + table(rows, cols, left=("variant", "samples_per_s_call", "gap_call"))
        + "</section>"
    )


def _prediction_section(run: Run) -> str:
    pred = run.prediction
    if pred is None or pred.empty:
        return ""
    target = run.prediction_info.get("target") or {}
    what = ", ".join(
        f"{k} {v}" for k, v in target.items() if v not in (None, "", {}) and k != "ceiling"
    )
    cols = [
        "np",
        "device",
        "synthetic_samples_per_s",
        "real_samples_per_s",
        "gap_pct",
        "dominant",
        "advice",
    ]
    notes = "".join(f"<li>{esc(n)}</li>" for n in run.prediction_info.get("notes") or [])
    return (
        f'<section id="prediction"><h2>predict: the target cluster</h2><p class="meta">target: {esc(what)}</p>'
        + figure(
            "predict",
            plots.prediction(pred),
            "Predicted gap per worker count on the target, each point "
            "labelled with the term that dominates its real step.",
        )
        + table(pred, cols)
        + (f"<ul>{notes}</ul>" if notes else "")
        + "</section>"
    )


def _tune_section(run: Run) -> str:
    trials = run.trials
    if trials is None or trials.empty:
        return ""
    info = run.tune_info
    knobs = [
        c
        for c in trials.columns
        if c
        not in ("samples_per_s", "half_pct", "cpu_cores_used", "seconds", "stop", "phase", "error")
    ]
    best = trials.sort_values("samples_per_s", ascending=False).head(10)
    head = ""
    if info.get("winner"):
        auto = (info.get("autotune") or {}).get("samples_per_s")
        default = (info.get("scenario_default") or {}).get("samples_per_s")
        head = (
            f'<p><b>winner</b> ({_num(info.get("winner_samples_per_s"), 0)} samples/s on '
            f'{esc(info.get("cores_per_rank"))} core(s); {esc((info.get("autotune") or {}).get("label", "AUTOTUNE"))} {_num(auto, 0)}, the scenario\'s settings '
            f'{_num(default, 0)}): '
            + ", ".join(f"{esc(k)}={esc(v)}" for k, v in info["winner"].items())
            + "</p>"
        )
    return (
        '<section id="tune"><h2>tune: the trials</h2>'
        + head
        + figure(
            "tune",
            plots.tune_trials(trials.reset_index(drop=True)),
            "Every trial's pipeline-only rate, in the order the search ran them; circled: cache on.",
        )
        + "<p>The ten fastest trials:</p>"
        + table(
            best, knobs + ["samples_per_s", "cpu_cores_used", "phase", "stop"], {"samples_per_s": 0}
        )
        + "</section>"
    )


def _ranks_ran_on(summary) -> str:
    """The header's line of where each worker count's ranks ran, when any ran off this host."""
    if summary is None or summary.empty or "hosts" not in summary.columns:
        return ""
    placed = summary.drop_duplicates("np").set_index("np")["hosts"].fillna("").astype(str)
    if not any("," in h for h in placed):  # every launch on one host: the line above says it
        return ""
    return "<br>ranks ran on " + " · ".join(f"np={n}: {esc(h)}" for n, h in placed.items() if h)


def render_html(run: Run) -> str:
    m = run.manifest
    scenario = m.get("scenario") or {}
    name = scenario.get("name") or m.get("command") or "run"
    started = m.get("started_unix_s")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else "?"
    device = m.get("device", "real")
    summary = run.summary
    parts = [
        f"<h1>pipeprof · {esc(name)}</h1>",
        f'<p class="meta">{esc(" ".join(m.get("command_line") or []))}<br>started {esc(when)} on '
        f'{esc(m.get("host", "?"))} ({esc(m.get("cpu_cores", "?"))} CPU cores, {len(m.get("gpus") or [])} GPU(s))'
        + (f" · <b>EMULATED device: {esc(device)}</b>" if device not in ("real", None) else "")
        + f" · pipeprof {esc(m.get('pipeprof', __version__))}"
        + _ranks_ran_on(summary)
        + "</p>",
        _partial_banner(run),
        _verdicts(run),
        _against_section(run),
    ]
    if summary is not None and not summary.empty:
        parts.append(
            '<section id="scaling"><h2>Gap and scaling</h2>'
            + figure(
                "gap",
                plots.gap_vs_np(summary),
                "gap = 100 × (1 − real ÷ synthetic) at each worker count, with its 95% interval; "
                "the dashed lines are the 5% and 20% thresholds.",
            )
            + figure(
                "throughput",
                plots.throughput_vs_np(summary),
                "Samples/s of all workers, synthetic (the ceiling) and real, against the ideal "
                "linear line from synthetic np=1; right: scaling efficiency.",
            )
            + "</section>"
        )
    parts.append(_rank_section(run))
    gpu, host = run.telemetry.get("gpu"), run.telemetry.get("host")
    t0 = views.run_start(run.steps, gpu, host)
    tel = plots.telemetry_over_time(gpu, host, views.variant_spans(run.steps), t0)
    if tel:
        parts.append(
            '<section id="telemetry"><h2>GPU and CPU over the run</h2>'
            + figure(
                "telemetry",
                tel,
                "Sampled while training ran; shaded bands: one (np, variant) each.",
            )
            + "</section>"
        )
    if summary is not None and not summary.empty:
        abl = plots.ablation(summary, run.stages)
        if abl:
            stages = (
                table(
                    run.stages,
                    [
                        "stage",
                        "cores",
                        "samples_per_s_1",
                        "samples_per_s_configured",
                        "core_ms_per_sample_1",
                        "marginal_core_ms_1",
                    ],
                    {
                        "samples_per_s_1": 0,
                        "samples_per_s_configured": 0,
                        "core_ms_per_sample_1": 3,
                        "marginal_core_ms_1": 3,
                    },
                )
                if run.stages is not None
                else ""
            )
            parts.append(
                '<section id="ablation"><h2>Which stage costs what</h2>'
                + figure(
                    "ablation",
                    abl,
                    "Left: each rung of the ladder adds one stage; its bar is the ms "
                    "per step it adds (negative: it saves time). Right: each stage measured alone, "
                    "without the model, on one rank's cores.",
                )
                + stages
                + "</section>"
            )
    parts += [_prediction_section(run), _tune_section(run)]
    if summary is not None and not summary.empty:
        cols = [
            "np",
            "variant",
            "device",
            "samples_per_s",
            "samples_per_s_ci95",
            "samples_per_s_per_worker",
            "twin_samples_per_s",
            "gap_pct",
            "gap_pct_ci95",
            "scaling_efficiency_pct",
            "step_time_ms_p50",
            "step_time_ms_p95",
            "input_wait_pct",
            "gpu_util_pct",
            "cpu_util_pct",
            "cpu_cores_per_rank",
            "measured_steps",
            "measured_s",
            "stop_reason",
            "bad_files",
            "gap_closed_pct",
            "verdict",
            "straggler",
        ]
        parts.append(
            '<section id="summary"><h2>summary.csv</h2>' + table(summary, cols) + "</section>"
        )
    parts.append(
        '<section id="manifest"><h2>Manifest</h2><details><summary>versions, host, scenario, command line'
        f"</summary><pre>{esc(json.dumps(m, indent=2, default=str))}</pre></details></section>"
    )
    body = "\n".join(p for p in parts if p)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>pipeprof · {esc(name)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>'
        f"<body>\n{body}\n</body></html>\n"
    )


class HtmlReport:
    name = "html"

    def render(self, run: Run, dest: Path) -> list[Path]:
        path = dest / FILE
        atomic.write_text(path, render_html(run))
        return [path]
