#!/usr/bin/env python3
"""Figures from ServeLab run folders; `sim plot` runs this script (docs/experiments.md).

    servelab_plot.py [--out DIR] [--format png|svg|pdf] [--quiet] INPUT...

Each INPUT is a run folder (summary.json, requests.csv, steps.csv, and optionally schedule.csv,
events.csv, blocks.csv), a `sim compare` folder (compare.csv), a `sim sweep` folder
(sweep.csv) or a `sim validate` folder (validation.json, replay.csv). Figures written to DIR:

  latency-cdf            TTFT, TPOT and E2E CDFs, one line per run (every input's runs)
  RUN-throughput         tokens/s and finished requests/s over time, KV usage over time
  RUN-batch              per step: prefill vs decode tokens, running vs waiting requests
  RUN-gantt              per request: queued, prefilling, decoding, preempted, swapped
                         (needs schedule.csv; events.csv tells preempted from swapped)
  RUN-kv-blocks          which request holds which physical block over time (needs blocks.csv;
                         small runs only)
  GROUP-bars             per variant / point: throughput, TTFT and TPOT percentiles, goodput
                         (and goodput per GPU when a run has several GPUs), preemptions
                         (compare and sweep folders)
  GROUP-classes          per variant / point and request class (runs of a `type: mix`
                         workload, summary.json `classes`): TTFT p50 and p99 (log scale),
                         TPOT p50 and the share meeting the class's SLO
  GROUP-throughput-latency   p50/p99 TTFT and TPOT against achieved throughput
  GROUP-sweep            sweep folders: metrics against the first numeric sweep key (a panel
                         of goodput per GPU when a point has several GPUs)
  GROUP-energy           sweep folders whose runs know their energy (hardware entries with
                         `power:`): joules per output token, average power and MFU against the
                         first numeric sweep key
  GROUP-page-size        sweeps over serving.block_size: internal waste (unused KV slots)
                         against mean step time and throughput
  GROUP-kv-dtype         sweeps over model.kv_cache_dtype: KV capacity (blocks) per dtype, and
                         output throughput and TTFT p99 per dtype (against the first numeric
                         sweep key when there is one)
  GROUP-decode-steps     compare folders whose variants run different models, hardware or
                         parallel layouts (or the model's quantization, KV dtype, router skew):
                         the median duration of decode-only steps against their batch size,
                         and that time per sequence, one line per variant (batch sizes with
                         at least 3 such steps)
  step-time-validation   `sim validate` folders (validation.json, replay.csv): each engine
                         step's replayed duration against its measured one, log-log, with the
                         y = x line and a +-5 % band; one panel per engine run, one colour per
                         cost model that predicted it

Outputs are deterministic: no timestamps or software versions are embedded, SVG ids use a fixed
salt, PDF dates come from SOURCE_DATE_EPOCH=0.

Exit codes: 0 written, 2 bad input (names the folder), 3 matplotlib missing.
"""

import argparse
import csv
import json
import math
import os
import sys

os.environ.setdefault("SOURCE_DATE_EPOCH", "0")

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FormatStrFormatter, LogFormatterSciNotation, LogLocator, NullLocator
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"servelab_plot: matplotlib is not available to {sys.executable}: {e}", file=sys.stderr)
    sys.exit(3)

plt.rcParams.update(
    {
        "svg.hashsalt": "servelab",
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.fontsize": 8,
        # Labels are run, variant and folder names: a '$' in one is text, not mathtext (which
        # drew "cost $5 vs $10" as math and failed on an unbalanced '$').
        "text.parse_math": False,
    }
)

METADATA = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
}

# Gantt states and their colours.
STATE_COLORS = {
    "queued": "#c7c7c7",
    "prefilling": "#1f77b4",
    "decoding": "#2ca02c",
    "preempted": "#ff7f0e",
    "swapped": "#9467bd",
}
GANTT_MAX_REQUESTS = 48
KV_MAP_MAX_BLOCKS = 4096
KV_MAP_MAX_ROWS = 2_000_000


class InputError(Exception):
    pass


# The columns each file must have for what the figures read of it: a file of another shape is
# an InputError naming the column (exit 2), not empty figures or a traceback.
REQUIRED_COLUMNS = {
    "requests.csv": ("id", "arrival_s", "ttft_ms", "tpot_ms", "e2e_ms", "status"),
    "steps.csv": ("step", "start_s", "duration_ms"),
    "schedule.csv": ("step", "request", "num_tokens", "kind"),
    "events.csv": ("time_s", "request", "event", "detail"),
    "blocks.csv": ("request", "block", "start_s", "end_s"),
    "replay.csv": ("measured_ms", "predicted_ms"),
    "sweep.csv": ("point", "completed"),
    "compare.csv": ("variant",),
}
# Other columns a figure reads and the file lacks are an InputError too (Row, Columns), named
# when the figure reaches for them.


# Columns the figures read as numbers: an integer (never empty) or a number ("" allowed: a
# request that never finished has no TTFT). A value of another kind is an InputError naming the
# line, checked when the file is read, before any figure is drawn.
INT, NUMBER, COUNT, FINITE = "an integer", "a number", "a count", "a finite number"
# The metric columns of compare.csv and sweep.csv (every point's numbers; the others name the
# point and its settings).
GROUP_METRICS = (
    "completed", "rejected", "aborted", "duration_s", "requests_per_s", "input_tokens_per_s",
    "output_tokens_per_s", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
    "tpot_mean_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p50_ms",
    "e2e_p99_ms", "queueing_p50_ms", "goodput_requests_per_s", "slo_attainment", "preemptions",
    "recomputed_tokens", "prefix_hit_rate", "prompt_hit_rate", "kv_usage_mean", "kv_usage_max",
    "batch_seqs_mean", "slot_efficiency", "internal_fragmentation_mean", "unused_slots_mean",
    "step_ms_mean", "allocations_per_s", "evictions_per_s", "gpus", "goodput_per_gpu", "joules",
    "joules_per_output_token", "average_power_w", "mfu", "mbu")
TYPED_COLUMNS = {
    "requests.csv": {"id": INT, "arrival_s": NUMBER, "first_scheduled_s": NUMBER, "finish_s": NUMBER,
                     "ttft_ms": NUMBER, "tpot_ms": NUMBER, "e2e_ms": NUMBER, "preemptions": COUNT},
    "schedule.csv": {"step": INT, "request": INT, "num_tokens": INT},
    "events.csv": {"time_s": NUMBER, "request": INT},
    "blocks.csv": {"request": INT, "block": INT, "start_s": FINITE, "end_s": FINITE, "replica": INT},
    "compare.csv": {k: NUMBER for k in GROUP_METRICS},
    "sweep.csv": {k: NUMBER for k in GROUP_METRICS},
}
# Columns whose values are words of a known set (a truncated or hand-edited word would be drawn
# as another state).
WORD_COLUMNS = {
    "requests.csv": {"status": ("finished", "rejected", "aborted", "shed", "waiting", "running",
                                "preempted", "swapped")},
    "schedule.csv": {"kind": ("prefill", "decode")},
}


def check_value(path, line, key, kind, text):
    try:
        if kind == NUMBER:
            if text != "":
                float(text)
        elif kind == FINITE:
            if not math.isfinite(float(text)):
                raise ValueError
        elif kind == COUNT:
            if text != "" and int(text) < 0:
                raise ValueError
        else:
            int(text)
    except ValueError:
        raise InputError(f"{path}:{line}: column '{key}': expected {kind}, got '{text}'") from None


class MissingColumnIsInputError(dict):
    """A dict of a file's columns (`path`): a column its header lacks is an InputError naming the
    file (a file of another shape or version), not a KeyError."""
    __slots__ = ("path",)

    def __missing__(self, key):
        raise InputError(f"{self.path}:1: no column '{key}' in the header (not a ServeLab "
                         f"{os.path.basename(self.path)}, or one of another version?)")


class Row(MissingColumnIsInputError):
    """A CSV row; `line`: its line in the file."""
    __slots__ = ("line",)


class Columns(MissingColumnIsInputError):
    """steps.csv as numpy columns."""
    __slots__ = ()


def read_csv(path):
    """A ServeLab CSV as a list of Rows, or InputError naming the line: a missing column of
    REQUIRED_COLUMNS, a row with too few or too many fields, a last line without its end (a
    truncated file: ServeLab ends every line), a value of TYPED_COLUMNS or WORD_COLUMNS that is
    not of its kind, bytes that are not UTF-8."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.seek(0)
                    lines = f.read().count(b"\n") + 1
                    raise InputError(f"{path}:{lines}: the last line has no end (a truncated "
                                     "file? ServeLab ends every line)")
        with open(path, newline="", encoding="utf-8") as f:
            return csv_rows(path, csv.DictReader(f))
    except UnicodeDecodeError:
        raise InputError(f"{path}:{first_non_utf8_line(path)}: not UTF-8 text (ServeLab writes "
                         "its CSV files in UTF-8: one saved in another encoding?)") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None


def first_non_utf8_line(path):
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 1


def csv_rows(path, reader):
    name = os.path.basename(path)
    header = reader.fieldnames or []
    for column in REQUIRED_COLUMNS.get(name, ()):
        if column not in header:
            raise InputError(f"{path}:1: no column '{column}' in the header (not a ServeLab "
                             f"{name}?)")
    typed = [(k, kind) for k, kind in TYPED_COLUMNS.get(name, {}).items() if k in header]
    words = [(k, set(w)) for k, w in WORD_COLUMNS.get(name, {}).items() if k in header]
    rows = []
    for row in reader:
        line = reader.line_num
        if None in row or None in row.values():
            got = len(header) + len(row.get(None, [])) - sum(v is None for v in row.values())
            raise InputError(f"{path}:{line}: expected {len(header)} fields, got {got} "
                             "(a truncated or hand-edited file?)")
        for key, kind in typed:
            check_value(path, line, key, kind, row[key])
        for key, known in words:
            if row[key] not in known:
                raise InputError(f"{path}:{line}: column '{key}': expected one of "
                                 f"{', '.join(sorted(known))}, got '{row[key]}'")
        r = Row(row)
        r.path, r.line = path, line
        rows.append(r)
    return rows


def number_column(path, rows, key):
    """A column of a ServeLab CSV as floats, or InputError naming the line and the value."""
    out = []
    for r in rows:
        try:
            out.append(float(r[key]))
        except (TypeError, ValueError):
            raise InputError(f"{path}:{r.line}: column '{key}': expected a number, got "
                             f"'{r[key]}'") from None
    return np.array(out)


def read_json(path):
    """A JSON file, or InputError "PATH: not valid JSON: ..." (exit 2, no traceback)."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise InputError(f"{path}: not valid JSON: {e}") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None


def expect_type(path, key, value, kinds, what):
    """InputError "PATH: key 'KEY': expected WHAT, got VALUE" unless value is one of kinds (a bool
    is no number)."""
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        shown = json.dumps(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise InputError(f"{path}: key '{key}': expected {what}, got {shown}")
    return value


NUMBER_OR_NULL = (int, float, type(None))


def check_summary(path, s):
    """The summary.json fields the figures read have their types, or InputError naming the key
    (a hand-edited file never ends in a traceback)."""
    expect_type(path, "(top level)", s, (dict,), "an object")
    run = expect_type(path, "run", s.get("run", {}), (dict,), "an object")
    for key in ("model", "hardware"):
        expect_type(path, f"run.{key}", run.get(key, ""), (str,), "a string")
    blocks = run.get("num_gpu_blocks", 0)
    if not (isinstance(blocks, int) and not isinstance(blocks, bool) and blocks >= 0) and not (
            isinstance(blocks, str) and (blocks == "" or blocks.isdigit())):
        expect_type(path, "run.num_gpu_blocks", blocks, (), "a block count")
    if "cluster" in s:
        cluster = expect_type(path, "cluster", s["cluster"], (dict,), "an object")
        pools = expect_type(path, "cluster.pools", cluster.get("pools", []), (list,), "a list")
        for i, pool in enumerate(pools):
            at = f"cluster.pools[{i}]"
            expect_type(path, at, pool, (dict,), "an object")
            expect_type(path, f"{at}.role", pool.get("role", ""), (str,), "a string")
            replicas = expect_type(path, f"{at}.replicas", pool.get("replicas", []), (list,),
                                   "a list")
            for j, r in enumerate(replicas):
                expect_type(path, f"{at}.replicas[{j}]", r, (dict,), "an object")
                if "replica" not in r:
                    raise InputError(f"{path}: key '{at}.replicas[{j}]': no 'replica'")
                expect_type(path, f"{at}.replicas[{j}].busy_fraction", r.get("busy_fraction"),
                            (int, float), "a number")
    if "classes" in s:
        classes = expect_type(path, "classes", s["classes"], (dict,), "an object")
        for name, c in classes.items():
            at = f"classes.{name}"
            expect_type(path, at, c, (dict,), "an object")
            for group, keys in (("ttft_ms", ("p50", "p99")), ("tpot_ms", ("p50",)),
                                ("goodput", ("slo_attainment",))):
                g = expect_type(path, f"{at}.{group}", c.get(group), (dict,), "an object")
                for k in keys:
                    expect_type(path, f"{at}.{group}.{k}", g.get(k), NUMBER_OR_NULL,
                                "a number or null")
    return s


def check_report(path, r):
    """The validation.json fields the figure reads have their types, or InputError naming the
    key."""
    expect_type(path, "(top level)", r, (dict,), "an object")
    expect_type(path, "engine_dir", r.get("engine_dir", "?"), (str,), "a string")
    st = expect_type(path, "step_time", r.get("step_time", {}), (dict,), "an object")
    expect_type(path, "step_time.replay_cost_model", st.get("replay_cost_model", ""),
                (str, type(None)), "a string")
    return r


def or_nan(value):
    """A JSON number, NaN for null (what JSON writes for a NaN: no request to measure)."""
    return math.nan if value is None else value


def num(text, default=math.nan):
    return float(text) if text not in ("", None) else default


class Run:
    """One run folder."""

    def __init__(self, path, name):
        self.path = path
        self.name = name
        summary = os.path.join(path, "summary.json")
        self.summary = check_summary(summary, read_json(summary))
        self.point = name  # as its compare.csv or sweep.csv names it (`name` may be made unique)
        self._requests = None
        self._steps = None

    def file(self, name):
        p = os.path.join(self.path, name)
        return p if os.path.exists(p) else None

    def machine(self):
        """What the run's steps ran on: model, hardware and, from its config.yaml, the model's
        section (quantization, KV dtype, router skew) and the parallel layout, as written."""
        run = self.summary.get("run", {})
        sections = []
        p = self.file("config.yaml")
        if p:
            try:
                with open(p, encoding="utf-8") as f:
                    lines = f.read().splitlines()
            except UnicodeDecodeError:
                raise InputError(f"{p}:{first_non_utf8_line(p)}: not UTF-8 text (ServeLab writes "
                                 "config.yaml in UTF-8)") from None
            i = 0
            while i < len(lines):
                if lines[i].startswith(("model:", "parallel:", "topology:")):
                    j = i + 1
                    while j < len(lines) and lines[j].startswith(" "):
                        j += 1
                    sections.append("\n".join(lines[i:j]))
                    i = j
                else:
                    i += 1
        return (run.get("model"), run.get("hardware"), tuple(sections))

    @property
    def time_label(self):
        """The x label of its timelines: the simulator's clock, or a measured run's."""
        backend = self.summary.get("run", {}).get("backend", "sim")
        return "simulated time (s)" if backend == "sim" else "time (s)"

    @property
    def title(self):
        run = self.summary.get("run", {})
        return f"{self.name} ({run.get('model', '?')} on {run.get('hardware', '?')})"

    def requests(self):
        if self._requests is None:
            p = self.file("requests.csv")
            self._requests = read_csv(p) if p else []
        return self._requests

    def steps(self):
        """steps.csv as numpy columns."""
        if self._steps is None:
            p = self.file("steps.csv")
            cols = Columns()
            cols.path = p or os.path.join(self.path, "steps.csv")
            if p:
                rows = read_csv(p)
                keys = rows[0].keys() if rows else []
                for k in keys:
                    cols[k] = number_column(p, rows, k)
            self._steps = cols
        return self._steps


class Validation:
    """One `sim validate` folder: validation.json and replay.csv (one row per engine step)."""

    def __init__(self, path):
        self.path = path
        report = os.path.join(path, "validation.json")
        self.report = check_report(report, read_json(report))
        replay = os.path.join(path, "replay.csv")
        if not os.path.exists(replay):
            raise InputError(f"{path}: a `sim validate` folder without replay.csv: run sim "
                             "validate again")
        rows = read_csv(replay)
        self.measured_ms = number_column(replay, rows, "measured_ms")
        self.predicted_ms = number_column(replay, rows, "predicted_ms")

    @property
    def engine_run(self):
        """The measured run's folder name, without a trailing -engine."""
        name = os.path.basename(os.path.normpath(self.report.get("engine_dir", "?")))
        return name[: -len("-engine")] if name.endswith("-engine") else name

    @property
    def model(self):
        """"calibrated" or "roofline (H200)": the replay's cost model, without the file path."""
        m = self.report.get("step_time", {}).get("replay_cost_model", "") or "?"
        return "calibrated" if m.startswith("calibrated") else m


def folder_name(path):
    """A folder's own name, also for "." or "run/.." (the name of the folder they stand for)."""
    return os.path.basename(os.path.abspath(path)) or "root"


def unique_names(names):
    """`names` made unique: the first of each keeps it, a later one becomes name-2, name-3, ...,
    skipping every name in use, generated ones included (a folder `a-2` given beside two folders
    `a` keeps its name)."""
    used = set(names)
    seen = set()
    out = []
    for n in names:
        if n in seen:
            k = 2
            while f"{n}-{k}" in used:
                k += 1
            n = f"{n}-{k}"
            used.add(n)
        seen.add(n)
        out.append(n)
    return out


def runs_of(path):
    """The runs an input folder stands for, and its kind."""
    if not os.path.isdir(path):
        raise InputError(f"{path}: no such folder")
    if os.path.exists(os.path.join(path, "summary.json")):
        return "run", [Run(path, folder_name(path))]
    if os.path.exists(os.path.join(path, "validation.json")) and not any(
        os.path.exists(os.path.join(path, t)) for t in ("sweep.csv", "compare.csv")
    ):
        return "validation", [Validation(path)]
    for kind, table, column in (("sweep", "sweep.csv", "point"), ("compare", "compare.csv", "variant")):
        t = os.path.join(path, table)
        if os.path.exists(t):
            runs = []
            for line, row in enumerate(read_csv(t), start=2):
                sub = os.path.join(path, row[column])
                if not os.path.exists(os.path.join(sub, "summary.json")):
                    # Its bars would come from the table and its curves be missing: refused.
                    raise InputError(f"{t}:{line}: {column} '{row[column]}' has no run folder "
                                     f"({os.path.join(sub, 'summary.json')} is missing): the "
                                     f"{kind} folder is incomplete")
                runs.append(Run(sub, row[column]))
            if not runs:
                # Nothing to draw: the folder's table was cut short (sim writes a row per run).
                raise InputError(f"{t}: no rows under its header: the {kind} folder is incomplete")
            return kind, runs
    raise InputError(f"{path}: not a run folder (no summary.json), nor a compare or sweep folder")


_SUPERSCRIPT = str.maketrans("-\N{MINUS SIGN}0123456789", "⁻⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


class PlainLogFormatter(LogFormatterSciNotation):
    """A log axis's tick labels (10⁴, 2⁵, 3×10¹) in plain text: with text.parse_math off (labels
    are run and variant names) matplotlib's own mathtext labels would print as
    "$\\mathdefault{10^{4}}$". Same ticks and the same choice of labelled ticks as matplotlib's."""

    def __call__(self, x, pos=None):
        s = super().__call__(x, pos)
        if not (s.startswith("$\\mathdefault{") and s.endswith("}$")):
            return s
        body = s[len("$\\mathdefault{"):-2].replace("\\times", "×").replace("\\cdot", "·")
        out, i = [], 0
        while i < len(body):
            if body.startswith("^{", i):
                end = body.index("}", i)
                out.append(body[i + 2:end].translate(_SUPERSCRIPT))
                i = end + 1
            else:
                out.append(body[i])
                i += 1
        return "".join(out)


def plain_log_labels(fig):
    """Every log axis of `fig` still on matplotlib's mathtext labels gets PlainLogFormatter's
    (see there); a formatter a figure set itself is kept."""
    for ax in fig.get_axes():
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale != "log":
                continue
            base = axis.get_transform().base
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                f = get()
                if type(f) is LogFormatterSciNotation:
                    put(PlainLogFormatter(base, labelOnlyBase=f.labelOnlyBase))


def save(fig, out_dir, stem, fmt, written):
    path = os.path.join(out_dir, f"{stem}.{fmt}")
    plain_log_labels(fig)
    try:
        fig.savefig(path, format=fmt, metadata=METADATA[fmt])
    except OSError as e:
        # A full disk or a quota: the user's to fix (exit code 2), named as the figure the
        # output folder would hold; the staged figures are removed.
        raise InputError(f"{stem}.{fmt}: cannot write the figure: {e.strerror}") from None
    finally:
        plt.close(fig)
    written.append(path)


# ---------------------------------------------------------------------------------------------
# Latency CDFs


def latency_cdf(runs, out_dir, fmt, written):
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), constrained_layout=True)
    metrics = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E latency"))
    many = len(runs) > 10
    for ax, (col, label) in zip(axes, metrics):
        drawn = 0
        for i, run in enumerate(runs):
            v = np.sort(np.array([num(r[col]) for r in run.requests() if r["status"] == "finished" and r[col] != ""]))
            if v.size == 0:
                continue
            y = np.arange(1, v.size + 1) / v.size
            ax.step(v, y, where="post", label=run.name, linewidth=1.0 if many else 1.4)
            drawn += 1
        if drawn == 0:  # say so, rather than leave empty axes that read as a drawing failure
            ax.text(0.5, 0.5, "no finished request to draw", ha="center", va="center",
                    transform=ax.transAxes, fontsize=9, color="gray")
            ax.set_xticks([])
            ax.set_ylim(0, 1.01)
            ax.set_title(f"{label} CDF")
            continue
        ax.set_xscale("log")
        ax.set_xlabel(f"{label} (ms, log scale)")
        ax.set_ylabel("fraction of finished requests")
        ax.set_ylim(0, 1.01)
        ax.set_title(f"{label} CDF")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        axes[-1].legend(handles, labels, loc="lower right", ncol=2 if many else 1, fontsize=7 if many else 8)
    fig.suptitle("Latency distributions: " + ", ".join(r.name for r in runs[:6]) + (" ..." if len(runs) > 6 else ""))
    save(fig, out_dir, "latency-cdf", fmt, written)


# ---------------------------------------------------------------------------------------------
# Per-run figures


def kv_blocks_over_time(s):
    """(used, used + free, cached) KV blocks after each steps.csv row. A cluster's rows interleave
    its replicas, each counting its own pool: the sums over every replica's latest row."""
    used, free, cached = s["kv_blocks_used"], s["kv_blocks_free"], s["kv_blocks_cached"]
    if "replica" not in s:
        return used, used + free, cached
    latest = {}
    su = st = sc = 0.0
    out = np.zeros((3, used.size))
    for k, rep in enumerate(s["replica"]):
        u, t, c = latest.get(rep, (0.0, 0.0, 0.0))
        su, st, sc = su - u, st - t, sc - c
        latest[rep] = (used[k], used[k] + free[k], cached[k])
        su, st, sc = su + used[k], st + used[k] + free[k], sc + cached[k]
        out[:, k] = (su, st, sc)
    return out[0], out[1], out[2]


def throughput_over_time(run, out_dir, fmt, written):
    s = run.steps()
    if not s or s["start_s"].size == 0:
        return
    start = s["start_s"]
    end = start + s["duration_ms"] / 1000.0
    t0, t1 = float(start.min()), float(end.max())
    nbins = int(min(120, max(10, s["start_s"].size // 4)))
    edges = np.linspace(t0, t1 if t1 > t0 else t0 + 1e-3, nbins + 1)
    width = edges[1] - edges[0]
    centers = (edges[:-1] + edges[1:]) / 2
    pre, _ = np.histogram(start, bins=edges, weights=s["prefill_tokens"])
    dec, _ = np.histogram(start, bins=edges, weights=s["decode_tokens"])
    fin = [num(r["finish_s"]) for r in run.requests() if r["status"] == "finished"]
    # Into the bins: the last finish is the last step's end, which the sum start + duration can
    # round below (the last request fell out of the histogram).
    fin = np.clip(np.array(fin), edges[0], edges[-1])
    done, _ = np.histogram(fin, bins=edges) if fin.size else (np.zeros(nbins), None)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, constrained_layout=True)
    ax1.stackplot(centers, pre / width, dec / width, labels=["prefill tokens/s", "decode tokens/s"],
                  colors=[STATE_COLORS["prefilling"], STATE_COLORS["decoding"]], alpha=0.8, step="mid")
    ax1.set_ylabel("tokens computed per second")
    ax1.set_title(f"Throughput over time: {run.title}")
    axr = ax1.twinx()
    axr.plot(centers, done / width, color="black", linewidth=1.2, label="finished requests/s")
    axr.set_ylabel("finished requests per second")
    axr.grid(False)
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = axr.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, loc="upper left")

    used, total, cached_blocks = kv_blocks_over_time(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        usage = np.where(total > 0, used / total * 100, 0)
        cached = np.where(total > 0, cached_blocks / total * 100, 0)
    every = " of all replicas" if "replica" in s else ""
    ax2.step(start, usage, where="post", color="#d62728", linewidth=1.0,
             label=f"KV usage (blocks{every} held by requests)")
    ax2.step(start, cached, where="post", color="#8c564b", linewidth=0.8, alpha=0.8,
             label="free blocks holding cached prefixes")
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("share of KV blocks (%)")
    ax2.set_xlabel(run.time_label)
    ax2.set_title("KV cache usage over time")
    ax2.legend(loc="upper left")
    save(fig, out_dir, f"{run.name}-throughput", fmt, written)


def batch_composition(run, out_dir, fmt, written):
    s = run.steps()
    if not s or s["step"].size == 0:
        return
    x = s["step"]
    pre_t, dec_t, xb = s["prefill_tokens"], s["decode_tokens"], x
    window = 1
    if x.size > 400:
        # Too many steps to draw one by one: means over windows of `window` consecutive steps.
        window = int(math.ceil(x.size / 400))
        n = x.size // window * window
        xb = x[:n].reshape(-1, window)[:, 0]
        pre_t = pre_t[:n].reshape(-1, window).mean(axis=1)
        dec_t = dec_t[:n].reshape(-1, window).mean(axis=1)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, constrained_layout=True)
    ax1.stackplot(xb, pre_t, dec_t, labels=["prefill tokens", "decode tokens"],
                  colors=[STATE_COLORS["prefilling"], STATE_COLORS["decoding"]], step="post", alpha=0.85)
    ax1.set_ylabel("tokens per step" + (f" (mean of {window} steps)" if window > 1 else ""))
    ax1.set_title(f"Batch composition per step: {run.title}")
    ax1.legend(loc="upper right")
    ax2.step(x, s["running"], where="post", label="running requests", color="#2ca02c", linewidth=1.0)
    ax2.step(x, s["waiting"], where="post", label="waiting requests", color="#7f7f7f", linewidth=1.0)
    pre = s.get("preempted")
    if pre is not None and pre.sum() > 0:
        idx = pre > 0
        ax2.scatter(x[idx], s["running"][idx], s=8, color=STATE_COLORS["preempted"], zorder=3,
                    label="steps that preempted")
    ax2.set_ylabel("requests")
    ax2.set_xlabel("step")
    ax2.legend(loc="upper right")
    save(fig, out_dir, f"{run.name}-batch", fmt, written)


# ---------------------------------------------------------------------------------------------
# Cluster runs (steps.csv with a `replica` column; docs/metrics.md, "Cluster runs")


def is_cluster(run):
    return "cluster" in run.summary


def replica_load(run, out_dir, fmt, written):
    """Per-replica requests (running + waiting) over time, and each replica's busy fraction."""
    s = run.steps()
    if not s or "replica" not in s or s["start_s"].size == 0:
        return
    replicas = sorted(set(int(r) for r in s["replica"]))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), constrained_layout=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    cmap = plt.get_cmap("tab20")
    for k, rep in enumerate(replicas):
        idx = s["replica"] == rep
        start = s["start_s"][idx]
        end = start + s["duration_ms"][idx] / 1000.0
        load = s["running"][idx] + s["waiting"][idx]
        # Between a step's end and the replica's next step it holds no request (it would step):
        # the line drops to 0 there instead of holding the last step's value through the gap.
        xs, ys = [], []
        for i in range(start.size):
            xs.append(start[i])
            ys.append(load[i])
            if i + 1 == start.size or start[i + 1] > end[i] + 1e-9:
                xs.append(end[i])
                ys.append(0.0)
        ax1.step(xs, ys, where="post", linewidth=0.9, color=cmap(k % 20),
                 label=f"replica {rep}" if len(replicas) <= 16 else None)
    ax1.set_ylabel("requests (running + waiting)")
    ax1.set_xlabel(run.time_label)
    ax1.set_title(f"Per-replica load: {run.title}")
    if len(replicas) <= 16:
        ax1.legend(loc="upper right", ncol=2, fontsize="small")
    names, busy, colors = [], [], []
    role_colors = {"unified": STATE_COLORS["prefilling"], "prefill": STATE_COLORS["prefilling"],
                   "decode": STATE_COLORS["decoding"]}
    for pool in run.summary["cluster"].get("pools", []):
        for r in pool.get("replicas", []):
            names.append(str(r["replica"]))
            busy.append(100 * r["busy_fraction"])
            colors.append(role_colors.get(pool.get("role"), "#7f7f7f"))
    ax2.bar(names, busy, color=colors)
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("busy (% of the run)")
    ax2.set_xlabel("replica (blue: unified or prefill; green: decode)")
    ax2.set_title("Step time per replica")
    save(fig, out_dir, f"{run.name}-replicas", fmt, written)


def transfer_timeline(run, out_dir, fmt, written):
    """P/D: each KV transfer as a bar on its decode replica's row (grey: queued for the link)."""
    p = run.file("events.csv")
    if not p:
        return
    rows = [r for r in read_csv(p) if r["event"] == "transfer"]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(9, 4.5), constrained_layout=True)
    waits, moves = {}, {}
    for r in rows:
        try:
            parts = r["detail"].split(" ")
            dst = int(parts[0].split("->")[1])
            fields = dict(f.split("=", 1) for f in parts[1:])
            wait = float(fields["wait_ms"]) / 1000
            move = float(fields["transfer_ms"]) / 1000
            if "start_s" in fields:
                float(fields["start_s"])
        except (IndexError, ValueError, KeyError):
            raise InputError(f"{p}:{r.line}: a transfer's detail '{r['detail']}' is not "
                             "'SRC->DST bytes=B wait_ms=W transfer_ms=T start_s=S'") from None
        # The first byte's start: the event's time is the prefill's end (or, shared, the
        # transfer's end), and a layer-wise transfer starts before it. Files written before
        # start_s existed: the event's time plus the wait.
        start = float(fields["start_s"]) if "start_s" in fields else float(r["time_s"]) + wait
        waits.setdefault(dst, []).append((start - wait, wait))
        moves.setdefault(dst, []).append((start, move))
    for dst in sorted(moves):
        ax.broken_barh([w for w in waits[dst] if w[1] > 0], (dst - 0.4, 0.8), color="#bbbbbb")
        ax.broken_barh(moves[dst], (dst - 0.4, 0.8), color=STATE_COLORS["decoding"])
    ax.set_yticks(sorted(moves))
    ax.set_ylabel("decode replica")
    ax.set_xlabel(run.time_label)
    ax.set_title(f"KV transfers (grey: waiting for the link): {run.title}")
    save(fig, out_dir, f"{run.name}-transfers", fmt, written)


def merge(intervals):
    """Merges touching [a, b) intervals (sorted by start)."""
    out = []
    for a, b in intervals:
        if out and a <= out[-1][1] + 1e-12:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def gantt(run, out_dir, fmt, written):
    sched = run.file("schedule.csv")
    if not sched:
        return
    s = run.steps()
    if not s:
        return
    step_start = dict(zip(s["step"].astype(int).tolist(), s["start_s"].tolist()))
    step_end = {k: v + d / 1000.0 for k, v, d in zip(s["step"].astype(int).tolist(), s["start_s"].tolist(),
                                                       s["duration_ms"].tolist())}
    reqs = [r for r in run.requests() if r["status"] not in ("rejected", "shed")]
    reqs.sort(key=lambda r: int(r["id"]))
    # A window of consecutive requests, around the first preempted one when there is one.
    first = next((i for i, r in enumerate(reqs) if int(r["preemptions"] or 0) > 0), 0)
    lo = max(0, min(first - GANTT_MAX_REQUESTS // 2, len(reqs) - GANTT_MAX_REQUESTS))
    chosen = reqs[lo:lo + GANTT_MAX_REQUESTS]
    ids = {int(r["id"]): i for i, r in enumerate(chosen)}
    runs_of_req = {i: {"prefilling": [], "decoding": []} for i in ids}
    first_step = {}
    for line, row in enumerate(read_csv(sched), start=2):
        rid = int(row["request"])
        if rid not in ids:
            continue
        st = int(row["step"])
        if st not in step_start:
            raise InputError(f"{sched}:{line}: step {st} is not in steps.csv")
        kind = "prefilling" if row["kind"] == "prefill" else "decoding"
        runs_of_req[rid][kind].append((step_start[st], step_end[st]))
        first_step.setdefault(rid, step_start[st])
    # Preempted / swapped: from the preemption to the next step that schedules the request.
    waits = {i: {"preempted": [], "swapped": []} for i in ids}
    ev = run.file("events.csv")
    if ev:
        starts = {rid: sorted(a for a, _ in runs_of_req[rid]["prefilling"] + runs_of_req[rid]["decoding"])
                  for rid in ids}
        for row in read_csv(ev):
            rid = int(row["request"])
            if rid not in ids or row["event"] != "preempt":
                continue
            t = num(row["time_s"])
            later = [a for a in starts[rid] if a >= t]
            end = later[0] if later else t
            waits[rid]["swapped" if row["detail"] == "swap" else "preempted"].append((t, end))

    fig_h = max(3.0, 0.12 * len(chosen) + 1.4)
    fig, ax = plt.subplots(figsize=(10, fig_h), constrained_layout=True)
    for r in chosen:
        rid = int(r["id"])
        y = ids[rid]
        arrival = num(r["arrival_s"])
        first = num(r["first_scheduled_s"])
        if not math.isnan(first):
            ax.broken_barh([(arrival, max(first - arrival, 0))], (y - 0.4, 0.8), color=STATE_COLORS["queued"])
        for state in ("prefilling", "decoding"):
            iv = merge(sorted(runs_of_req[rid][state]))
            ax.broken_barh([(a, b - a) for a, b in iv], (y - 0.4, 0.8), color=STATE_COLORS[state])
        for state in ("preempted", "swapped"):
            iv = waits[rid][state]
            if iv:
                ax.broken_barh([(a, max(b - a, 0)) for a, b in iv], (y - 0.4, 0.8), color=STATE_COLORS[state])
    ax.set_yticks(range(len(chosen)))
    ax.set_yticklabels([r["id"] for r in chosen], fontsize=6 if len(chosen) > 24 else 8)
    ax.invert_yaxis()
    ax.set_ylabel("request id")
    ax.set_xlabel(run.time_label)
    shown = (f"requests {chosen[0]['id']}-{chosen[-1]['id']} of {len(reqs)}" if len(reqs) > len(chosen)
             else f"{len(chosen)} requests")
    note = "" if ev else " (no events.csv: preemptions not shown)"
    ax.set_title(f"Request timeline ({shown}){note}: {run.title}")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in STATE_COLORS.items()], loc="lower right",
              ncol=5, fontsize=7)
    ax.grid(axis="y", alpha=0)
    save(fig, out_dir, f"{run.name}-gantt", fmt, written)


def kv_block_map(run, out_dir, fmt, written, quiet):
    path = run.file("blocks.csv")
    if not path:
        return
    pool = int(run.summary.get("run", {}).get("num_gpu_blocks", "0") or 0)
    rows = read_csv(path)
    if not rows or len(rows) > KV_MAP_MAX_ROWS:
        return
    # The map shows block ids up to the highest one used (the pool may be far larger); a
    # cluster's replicas (the `replica` column) are stacked, each its own band of rows, since
    # their block ids name different memories.
    replica_of = (lambda r: int(r["replica"])) if "replica" in rows[0] else (lambda r: 0)
    used = {}
    for r in rows:
        used[replica_of(r)] = max(used.get(replica_of(r), 0), int(r["block"]) + 1)
    offset, num_blocks = {}, 0
    for rep in sorted(used):
        offset[rep] = num_blocks
        num_blocks += used[rep]
    if num_blocks > KV_MAP_MAX_BLOCKS:
        if not quiet:
            print(f"servelab_plot: {run.name}: blocks up to id {num_blocks - 1} used, too many for a "
                  f"block map (at most {KV_MAP_MAX_BLOCKS}); skipped", file=sys.stderr)
        return
    s = run.steps()
    t0 = float(s["start_s"].min()) if s else 0.0
    t1 = float((s["start_s"] + s["duration_ms"] / 1000.0).max()) if s else 1.0
    cols = 400
    grid = np.full((num_blocks, cols), -1, dtype=np.int64)
    span = (t1 - t0) or 1.0
    requests_seen = []

    def cells(start, end):
        a = int((start - t0) / span * cols)
        e = int(math.ceil((end - t0) / span * cols))
        return max(a, 0), min(max(e, a + 1), cols)

    # Each block's holdings in time order: a column shows the first holder; black only where two
    # requests hold the block at the same time (a block handed from one request to the next
    # inside one column's time is not shared).
    by_block = {}
    for r in rows:
        b = offset[replica_of(r)] + int(r["block"])
        rid = int(r["request"])
        by_block.setdefault(b, []).append((num(r["start_s"]), num(r["end_s"]), rid))
        requests_seen.append(rid)
    for b, held in by_block.items():
        held.sort()
        active = []
        for start, end, rid in held:
            a, e = cells(start, end)
            cell = grid[b, a:e]
            cell[cell == -1] = rid
            active = [h for h in active if h[1] > start]
            for other_end, _, other in ((h[1], h[0], h[2]) for h in active):
                if other != rid:
                    sa, se = cells(start, min(end, other_end))
                    grid[b, sa:se] = -2
            active.append((start, end, rid))
    # Colours: a request's colour is its id modulo a 20-colour palette; white is free, black is
    # a block held by several requests at once (a shared prefix).
    palette = [plt.cm.tab20(i) for i in range(20)]
    cmap = ListedColormap([(1, 1, 1, 1), (0, 0, 0, 1)] + palette)
    img = np.where(grid == -1, 0, np.where(grid == -2, 1, 2 + (grid % 20)))
    fig, ax = plt.subplots(figsize=(9, 5), constrained_layout=True)
    ax.imshow(img, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=21, origin="lower",
              extent=(t0, t1, -0.5, num_blocks - 0.5))
    ax.set_xlabel(run.time_label)
    ax.grid(False)
    if len(used) > 1:
        for rep in sorted(used)[1:]:
            ax.axhline(offset[rep] - 0.5, color="gray", linewidth=0.8)
        ax.set_yticks([offset[rep] + used[rep] / 2 - 0.5 for rep in sorted(used)])
        ax.set_yticklabels([f"replica {rep}" for rep in sorted(used)])
        ax.set_ylabel("physical KV blocks, by replica")
    else:
        ax.set_ylabel("physical KV block id")
    n_req = len(set(requests_seen))
    ax.set_title(f"KV block map (ids 0-{num_blocks - 1} of {pool}; {n_req} requests, colour = request): "
                 f"{run.title}", fontsize=9)
    ax.legend(handles=[Patch(facecolor="white", edgecolor="gray", label="free"),
                       Patch(color="black", label="shared by several requests"),
                       Patch(color=palette[0], label="held by one request (colour by id)")],
              loc="upper right", fontsize=7)
    save(fig, out_dir, f"{run.name}-kv-blocks", fmt, written)


# ---------------------------------------------------------------------------------------------
# Compare and sweep folders


def group_table(path, kind):
    table = read_csv(os.path.join(path, "sweep.csv" if kind == "sweep" else "compare.csv"))
    label = "point" if kind == "sweep" else "variant"
    return table, label


def bars(path, group, kind, out_dir, fmt, written):
    table, label = group_table(path, kind)
    if not table:
        return
    names = [r[label] for r in table]
    x = np.arange(len(names))
    panels = [
        ("throughput (requests/s)", [("requests_per_s", "achieved")]),
        ("output throughput (tokens/s)", [("output_tokens_per_s", "output tokens/s")]),
        ("TTFT (ms)", [("ttft_p50_ms", "p50"), ("ttft_p99_ms", "p99")]),
        ("TPOT (ms)", [("tpot_p50_ms", "p50"), ("tpot_p99_ms", "p99")]),
        ("goodput (requests/s meeting the SLOs)", [("goodput_requests_per_s", "goodput")]),
        ("preemptions (count)", [("preemptions", "preemptions")]),
    ]
    # Runs of several GPUs (the table's gpus column): what each GPU buys, beside the goodput.
    if "goodput_per_gpu" in table[0]:
        panels[4][1].append(("goodput_per_gpu", "per GPU"))
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), constrained_layout=True)
    for ax, (title, series) in zip(axes.flat, panels):
        w = 0.8 / len(series)
        drawn = []
        for k, (col, lab) in enumerate(series):
            vals = [num(r.get(col, "")) for r in table]
            drawn += vals
            ax.bar(x + (k - (len(series) - 1) / 2) * w, vals, width=w, label=lab)
        finite = [v for v in drawn if np.isfinite(v)]
        if not finite or not any(finite):
            # Nothing but zeros (no preemptions anywhere), or no value at all (no TPOT when every
            # request has one output token): say so rather than draw an empty axis.
            ax.set_ylim(0, 1)
            ax.text(0.5, 0.5, "0 in every run" if finite else "none in any run",
                    transform=ax.transAxes, ha="center", va="center", color="0.4")
        ax.set_title(title)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=6 if len(names) > 8 else 8)
        ax.set_ylabel(title.split(" (")[-1].rstrip(")") if "(" in title else title)
        if len(series) > 1:
            ax.legend()
    fig.suptitle(f"{group}: per-{label} comparison")
    save(fig, out_dir, f"{group}-bars", fmt, written)


def class_bars(path, group, kind, runs, out_dir, fmt, written):
    """Per request class: the group's runs side by side, a bar per class (only when its runs
    report classes)."""
    runs = [r for r in runs if r.summary.get("classes")]
    if not runs:
        return
    classes = []
    for r in runs:
        for name in r.summary["classes"]:
            if name not in classes:
                classes.append(name)
    names = [r.name for r in runs]
    x = np.arange(len(names))
    w = 0.8 / len(classes)
    panels = [
        ("TTFT p50 (ms)", lambda c: or_nan(c["ttft_ms"]["p50"]), True),
        ("TTFT p99 (ms)", lambda c: or_nan(c["ttft_ms"]["p99"]), True),
        ("TPOT p50 (ms)", lambda c: or_nan(c["tpot_ms"]["p50"]), False),
        ("requests meeting the class's SLO (%)",
         lambda c: 100 * or_nan(c["goodput"]["slo_attainment"]), False),
    ]
    label = "point" if kind == "sweep" else "variant"
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8), constrained_layout=True)
    for ax, (title, value, log) in zip(axes, panels):
        for k, cls in enumerate(classes):
            vals = [value(r.summary["classes"][cls]) if cls in r.summary["classes"] else float("nan")
                    for r in runs]
            ax.bar(x + (k - (len(classes) - 1) / 2) * w, vals, width=w, label=cls)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=6 if len(names) > 8 else 8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, [f"class {c}" for c in labels], loc="upper right", ncol=len(classes),
               fontsize=8)
    fig.suptitle(f"{group}: per-{label} comparison by request class")
    save(fig, out_dir, f"{group}-classes", fmt, written)


def sweep_axes(table):
    keys = list(table[0].keys())
    return keys[1:keys.index("completed")]


def is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def short_value(text, limit=28):
    """A sweep value for a legend: a long one (a list of pools, a mapping) cut with an ellipsis;
    a `variant` axis gives short names instead."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def sweep_lines(table):
    """(x axis key or None, [(label, rows)]) for a sweep table: lines over the first numeric key,
    one per combination of the others (long values shortened in the label, which stays unique)."""
    axes = sweep_axes(table)
    xkey = next((k for k in axes if all(is_number(r[k]) for r in table)), None)
    others = [k for k in axes if k != xkey]
    groups = {}
    for r in table:
        groups.setdefault(tuple(r[k] for k in others), []).append(r)
    if xkey:
        for rows in groups.values():
            rows.sort(key=lambda r: float(r[xkey]))
    lines, used = [], set()
    for values, rows in groups.items():
        label = ", ".join(f"{k.split('.')[-1]}={short_value(v)}" for k, v in zip(others, values)) or "sweep"
        if label in used:
            label = f"{label} #{len(lines) + 1}"
        used.add(label)
        lines.append((label, rows))
    return xkey, lines


def throughput_latency(path, group, kind, out_dir, fmt, written):
    table, label = group_table(path, kind)
    if not table:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for ax, metric, name in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        if kind == "sweep":
            _, lines = sweep_lines(table)
            for i, (lab, rows) in enumerate(lines):
                xs = [num(r["requests_per_s"]) for r in rows]
                color = f"C{i % 10}"
                ax.plot(xs, [num(r[f"{metric}_p50_ms"]) for r in rows], "o-", color=color, label=f"{lab} p50")
                ax.plot(xs, [num(r[f"{metric}_p99_ms"]) for r in rows], "s--", color=color, label=f"{lab} p99")
        else:
            for i, r in enumerate(table):
                color = f"C{i % 10}"
                xv = num(r["requests_per_s"])
                ax.plot([xv, xv], [num(r[f"{metric}_p50_ms"]), num(r[f"{metric}_p99_ms"])], "-", color=color,
                        linewidth=1)
                ax.plot(xv, num(r[f"{metric}_p50_ms"]), "o", color=color, label=f"{r[label]}")
                ax.plot(xv, num(r[f"{metric}_p99_ms"]), "s", color=color, markerfacecolor="none")
        ax.set_xlabel("achieved throughput (requests/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} p50 (filled) and p99 vs throughput")
    axes[1].legend(fontsize=6 if len(table) > 8 else 8, ncol=2 if len(table) > 8 else 1)
    fig.suptitle(f"{group}: throughput-latency")
    save(fig, out_dir, f"{group}-throughput-latency", fmt, written)


def sweep_group(path, group, needs=None):
    """(`group`, table, x key, lines) of a sweep folder whose table has a numeric sweep key
    (and the column `needs`, when given), or None."""
    table, _ = group_table(path, "sweep")
    if not table or (needs and needs not in table[0]):
        return None
    xkey, lines = sweep_lines(table)
    if not xkey:
        return None
    return group, table, xkey, lines


def sweep_curves(path, group, out_dir, fmt, written):
    found = sweep_group(path, group)
    if not found:
        return
    group, table, xkey, lines = found
    panels = [
        ("TTFT (ms)", [("ttft_p50_ms", "p50", "o-"), ("ttft_p99_ms", "p99", "s--")]),
        ("TPOT (ms)", [("tpot_p50_ms", "p50", "o-"), ("tpot_p99_ms", "p99", "s--")]),
        ("throughput (requests/s)", [("requests_per_s", "achieved", "o-"),
                                     ("goodput_requests_per_s", "goodput", "s--")]),
    ]
    # Points of several GPUs (sweep.csv's gpus column): a panel of what each GPU buys.
    if "goodput_per_gpu" in table[0]:
        panels.append(("goodput per GPU (requests/s)", [("goodput_per_gpu", "goodput / GPUs", "^-")]))
    # Up to two lines: each panel's legend names every curve. More: colour is the line, style the
    # series; the panels' legends name the styles and a legend beside them the lines, so that no
    # legend hides the curves.
    many = len(lines) > 2
    n = len(panels)
    if many:
        fig, axes = plt.subplots(1, n + 1, figsize=(4 * n + 2, 4), constrained_layout=True,
                                 gridspec_kw={"width_ratios": [1] * n + [0.42]})
        key = axes[n]
        axes = axes[:n]
    else:
        fig, axes = plt.subplots(1, n, figsize=(4 * n, 4), constrained_layout=True)
    numeric = [float(r[xkey]) for r in table]
    logx = min(numeric) > 0 and max(numeric) / min(numeric) >= 8
    for ax, (title, series) in zip(axes, panels):
        for i, (lab, rows) in enumerate(lines):
            xs = [float(r[xkey]) for r in rows]
            for col, sl, style in series:
                label = None if many else (f"{lab} {sl}" if len(lines) > 1 else sl)
                ax.plot(xs, [num(r[col]) for r in rows], style, color=f"C{i % 10}", label=label)
        if logx:
            ax.set_xscale("log", base=2)
        # A latency that spans two decades (a saturated point's queue beside the others) on a
        # log axis, so the points below saturation stay readable.
        ys = [num(r[col]) for _, rows in lines for r in rows for col, _, _ in series]
        ys = [y for y in ys if y == y and y > 0]
        if "ms" in title and ys and max(ys) / min(ys) >= 100:
            ax.set_yscale("log")
            title = title.replace(")", ", log scale)")
        ax.set_xlabel(xkey)
        ax.set_ylabel(title)
        ax.set_title(f"{title.split(' (')[0]} vs {xkey.split('.')[-1]}")
        if many:
            ax.legend(handles=[Line2D([], [], color="0.3", linestyle=style[1:], marker=style[0], label=sl)
                               for _, sl, style in series], fontsize=7)
        else:
            ax.legend(fontsize=7)
    if many:
        key.axis("off")
        key.legend(handles=[Line2D([], [], color=f"C{i % 10}", marker="o", label=lab)
                            for i, (lab, _) in enumerate(lines)], loc="center left", fontsize=8)
    fig.suptitle(f"{group}: sweep over {xkey}")
    save(fig, out_dir, f"{group}-sweep", fmt, written)


def energy_curves(path, group, out_dir, fmt, written):
    found = sweep_group(path, group, needs="joules_per_output_token")
    if not found:
        return
    group, table, xkey, lines = found
    panels = [
        ("energy (J per output token)", "joules_per_output_token", 1.0),
        ("average power (kW)", "average_power_w", 1e-3),
        ("MFU while busy (%)", "mfu", 100.0),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), constrained_layout=True)
    numeric = [float(r[xkey]) for r in table]
    logx = min(numeric) > 0 and max(numeric) / min(numeric) >= 8
    for ax, (title, col, scale) in zip(axes, panels):
        for i, (lab, rows) in enumerate(lines):
            xs = [float(r[xkey]) for r in rows]
            ax.plot(xs, [num(r[col]) * scale for r in rows], "o-", color=f"C{i % 10}", label=lab)
        if logx:
            ax.set_xscale("log", base=2)
        ys = [num(r[col]) for _, rows in lines for r in rows]
        ys = [y for y in ys if y == y and y > 0]
        if col == "joules_per_output_token" and ys and max(ys) / min(ys) >= 20:
            ax.set_yscale("log")
            title = title.replace(")", ", log scale)")
        ax.set_xlabel(xkey)
        ax.set_ylabel(title)
        ax.set_title(f"{title.split(' (')[0]} vs {xkey.split('.')[-1]}")
        if len(lines) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(f"{group}: energy over {xkey}")
    save(fig, out_dir, f"{group}-energy", fmt, written)


def decode_step_curves(path, group, runs, out_dir, fmt, written):
    """What a decode step costs at each batch size, per variant: for comparing models, GPUs or
    parallel layouts (a compare folder whose runs differ in run.model, run.hardware, or their
    config.yaml's model section or parallel layout)."""
    machines = {r.machine() for r in runs}
    if len(machines) < 2:
        return
    curves = []
    for run in runs:
        s = run.steps()
        if not s or "decode_tokens" not in s:
            continue
        decode_only = (s["prefill_tokens"] == 0) & (s["decode_tokens"] > 0)
        # Sequences, not tokens: a multi-step or speculative decode step computes several tokens
        # of each.
        batch, ms = s["num_seqs"][decode_only], s["duration_ms"][decode_only]
        xs, ys = [], []
        for b in np.unique(batch):
            sel = ms[batch == b]
            if sel.size >= 3:
                xs.append(b)
                ys.append(float(np.median(sel)))
        if xs:
            curves.append((run.name, np.array(xs), np.array(ys)))
    if not curves:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for i, (name, xs, ys) in enumerate(curves):
        left.plot(xs, ys, "o-", color=f"C{i % 10}", markersize=3, label=name)
        right.plot(xs, ys / xs, "o-", color=f"C{i % 10}", markersize=3, label=name)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("decode batch (sequences in a decode-only step)")
    right.set_yscale("log")
    left.set_ylabel("median step time (ms)")
    left.set_title("decode step time by batch")
    right.set_ylabel("step time per sequence (ms, log scale)")
    right.set_title("per sequence: what batching buys")
    left.legend(fontsize=8)
    fig.suptitle(f"{group}: decode-only steps")
    save(fig, out_dir, f"{group}-decode-steps", fmt, written)


def page_size_curves(path, group, out_dir, fmt, written):
    """Waste against step time over serving.block_size (docs/lessons/page-size.md)."""
    table, _ = group_table(path, "sweep")
    if not table or "unused_slots_mean" not in table[0]:
        return
    xkey, lines = sweep_lines(table)
    if xkey != "serving.block_size":
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    waste, step = axes[0], axes[0].twinx()
    for i, (lab, rows) in enumerate(lines):
        xs = [float(r[xkey]) for r in rows]
        suffix = f" ({lab})" if len(lines) > 1 else ""
        waste.plot(xs, [num(r["unused_slots_mean"]) for r in rows], "o-", color=f"C{(2 * i) % 10}",
                   label=f"unused KV slots{suffix}")
        step.plot(xs, [num(r["step_ms_mean"]) for r in rows], "s--", color=f"C{(2 * i + 1) % 10}",
                  label=f"mean step time{suffix}")
        axes[1].plot(xs, [num(r["output_tokens_per_s"]) for r in rows], "o-", color=f"C{i % 10}",
                     label=f"output tokens/s{suffix}")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("block size (tokens per page)")
        ax.set_xticks([float(r[xkey]) for r in lines[0][1]])
        ax.set_xticklabels([r[xkey] for r in lines[0][1]])
    waste.set_ylabel("held but unused KV slots (tokens, time-weighted mean)")
    step.set_ylabel("mean step time (ms)")
    waste.set_title("internal waste vs step time")
    h1, l1 = waste.get_legend_handles_labels()
    h2, l2 = step.get_legend_handles_labels()
    waste.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper center")
    axes[1].set_ylabel("output tokens/s")
    axes[1].set_title("throughput")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{group}: page size")
    save(fig, out_dir, f"{group}-page-size", fmt, written)


def kv_dtype_curves(path, group, runs, out_dir, fmt, written):
    """Capacity and throughput per KV cache dtype (docs/lessons/fp8-kv.md)."""
    table, _ = group_table(path, "sweep")
    key = "model.kv_cache_dtype"
    if not table or key not in sweep_axes(table):
        return
    # By the point's own name: two groups plotted together rename the second's runs.
    blocks = {r.point: num(str(r.summary.get("run", {}).get("num_gpu_blocks", ""))) for r in runs}
    numeric = [k for k in sweep_axes(table) if k != key and all(is_number(r[k]) for r in table)]
    xkey = numeric[0] if numeric else None
    dtypes = []
    for r in table:
        if r[key] not in dtypes:
            dtypes.append(r[key])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), constrained_layout=True)
    # Capacity: the same for every point of a dtype (the memory does not change with the load).
    caps = [max((blocks.get(r["point"], math.nan) for r in table if r[key] == d), default=math.nan)
            for d in dtypes]
    axes[0].bar(range(len(dtypes)), caps, color=[f"C{i % 10}" for i in range(len(dtypes))])
    for i, c in enumerate(caps):
        if not math.isnan(c):
            axes[0].annotate(f"{c:,.0f}", (i, c), ha="center", va="bottom", fontsize=8)
    axes[0].set_xticks(range(len(dtypes)))
    axes[0].set_xticklabels(dtypes)
    axes[0].set_ylabel("KV blocks")
    axes[0].set_title("KV capacity (blocks in the same memory)")
    panels = ((axes[1], "output_tokens_per_s", "output tokens/s", "output throughput"),
              (axes[2], "ttft_p99_ms", "TTFT p99 (ms)", "TTFT p99"))
    for ax, col, ylabel, title in panels:
        for i, d in enumerate(dtypes):
            rows = [r for r in table if r[key] == d]
            if xkey:
                rows.sort(key=lambda r: float(r[xkey]))
                ax.plot([float(r[xkey]) for r in rows], [num(r[col]) for r in rows], "o-",
                        color=f"C{i % 10}", label=d)
            else:
                ax.bar([i], [num(rows[0][col])], color=f"C{i % 10}", label=d)
        if xkey:
            ax.set_xlabel(xkey)
        else:
            ax.set_xticks(range(len(dtypes)))
            ax.set_xticklabels(dtypes)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.suptitle(f"{group}: KV cache dtype")
    save(fig, out_dir, f"{group}-kv-dtype", fmt, written)


# ---------------------------------------------------------------------------------------------
# Predicted against measured step time (`sim validate` folders)

VALIDATION_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]


def step_time_validation(validations, out_dir, fmt, written):
    # One panel per measured run (validations sharing an engine folder), one colour per cost
    # model, in input order.
    panels = {}
    for v in validations:
        panels.setdefault(v.engine_run, []).append(v)
    models = []
    for v in validations:
        if v.model not in models:
            models.append(v.model)
    n = len(panels)
    ncols = 1 if n == 1 else 2
    nrows = (n + ncols - 1) // ncols
    width, height = 5.2 * ncols, 4.2 * nrows + 0.4
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)
    # Fixed margins (in inches): tight_layout measures every minor tick of the log axes, which
    # costs seconds for a few panels.
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.2 / width, bottom=0.5 / height,
                        top=1 - 0.6 / height, wspace=0.3, hspace=0.35)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (run, vs) in zip(axes.flat, panels.items()):
        lo, hi = math.inf, 0.0
        for v in vs:
            keep = (v.measured_ms > 0) & (v.predicted_ms > 0)
            m, p = v.measured_ms[keep], v.predicted_ms[keep]
            if len(m) == 0:
                continue
            lo = min(lo, m.min(), p.min())
            hi = max(hi, m.max(), p.max())
            mape = 100 * float(np.mean(np.abs(p - m) / m))
            bias = 100 * float(np.mean((p - m) / m))
            color = VALIDATION_COLORS[models.index(v.model) % len(VALIDATION_COLORS)]
            ax.scatter(m, p, s=5, alpha=0.4, color=color, linewidths=0,
                       label=f"{v.model}: {mape:.1f} % mean |error| ({bias:+.1f} % bias), "
                             f"{len(m)} steps")
        if hi > 0:
            x = np.array([lo / 1.2, hi * 1.2])
            ax.fill_between(x, x * 0.95, x * 1.05, color="#999999", alpha=0.25, linewidth=0,
                            label="within 5 %")
            ax.plot(x, x, color="black", linewidth=0.8, linestyle="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            # Labelled ticks at 1, 2 and 5 per decade and no minor ones (each tick is an artist;
            # log axes' default minor ticks made this figure take seconds).
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FormatStrFormatter("%g"))
                axis.set_minor_locator(NullLocator())
            ax.set_xlim(x[0], x[1])
            ax.set_ylim(x[0], x[1])
        ax.set_xlabel("measured step time (ms)")
        ax.set_ylabel("predicted step time (ms)")
        ax.set_title(run)
        ax.legend(loc="upper left", fontsize=7, markerscale=3)
    fig.suptitle("Predicted against measured step time (each engine step replayed)")
    save(fig, out_dir, "step-time-validation", fmt, written)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", "-o", required=True)
    # Where to write (sim plot stages the figures beside --out and moves them there on success);
    # the paths printed are under --out. Default: --out itself.
    ap.add_argument("--stage")
    ap.add_argument("--format", choices=("png", "svg", "pdf"), default="png")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        return plot_all(args)
    except InputError as e:
        print(f"servelab_plot: error: {e}", file=sys.stderr)
        return 2


def plot_all(args):
    inputs = [(p, *runs_of(p)) for p in args.inputs]
    out = args.stage or args.out
    os.makedirs(out, exist_ok=True)
    written = []
    validations = [v for _, kind, vs in inputs if kind == "validation" for v in vs]
    inputs = [i for i in inputs if i[1] != "validation"]
    all_runs = [r for _, _, runs in inputs for r in runs]
    # Names must be unique within the output folder: runs' (figure names and legend labels) and
    # groups' (their figures' names; a run's and a group's figures differ in suffix).
    for r, name in zip(all_runs, unique_names([r.name for r in all_runs])):
        r.name = name
    group_names = iter(unique_names([folder_name(p) for p, kind, _ in inputs if kind != "run"]))
    if all_runs:
        latency_cdf(all_runs, out, args.format, written)
    for path, kind, runs in inputs:
        if kind == "run":
            run = runs[0]
            throughput_over_time(run, out, args.format, written)
            if is_cluster(run):
                # Step numbers, block ids and the schedule are per replica: other figures.
                replica_load(run, out, args.format, written)
                transfer_timeline(run, out, args.format, written)
                continue
            batch_composition(run, out, args.format, written)
            gantt(run, out, args.format, written)
            kv_block_map(run, out, args.format, written, args.quiet)
        else:
            group = next(group_names)
            bars(path, group, kind, out, args.format, written)
            class_bars(path, group, kind, runs, out, args.format, written)
            throughput_latency(path, group, kind, out, args.format, written)
            if kind == "compare":
                decode_step_curves(path, group, runs, out, args.format, written)
            if kind == "sweep":
                sweep_curves(path, group, out, args.format, written)
                energy_curves(path, group, out, args.format, written)
                page_size_curves(path, group, out, args.format, written)
                kv_dtype_curves(path, group, runs, out, args.format, written)
    if validations:
        step_time_validation(validations, out, args.format, written)
    if not args.quiet:
        for p in written:
            print(f"wrote {os.path.join(args.out, os.path.basename(p))}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        # Ctrl-C reaches `sim plot` too, which reports it and removes the staged figures.
        sys.exit(130)
