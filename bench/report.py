"""bench/report.py: docs/benchmarks.md and its plots from bench/harness.py's
results.json (write(R, outdir)).  Plots are PNGs made with gnuplot; each
section of the report is there even when its workload did not run (it then
says so), so that a reader, and test/t/045_bench_short.pl, can rely on it.
"""

import math
import os
import statistics
import subprocess
import traceback

from harness import LABEL, ENQ_LABEL, CATALOGS

SECTIONS = ["Summary: targets", "Machine and settings", "1. Enqueue", "2. Dequeue from a backlog",
            "3. Steady state", "4. Held snapshot", "5. Head cost", "6. WAL per event",
            "7. Cache on and off", "8. Memory", "How to run"]
PLOTS = ["steady_size.png", "steady_throughput.png", "steady_catalog.png", "held_size.png",
         "held_throughput.png"]
PLOTDIR = "benchmarks"      # the plots, next to benchmarks.md
STEADY_ORDER = ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman"]


class Conf(dict):
    """The run's CONF; a parameter missing from results.json reads None."""

    def __missing__(self, key):
        return None


def ints(xs):
    """The integers of a CONF list (bad items left out)."""
    out = []
    for x in xs or []:
        try:
            out.append(int(x))
        except (TypeError, ValueError):
            pass
    return out


def runs_of(res):
    """A workload's results without the entries that are not records, and
    each record's samples without those that have no time."""
    out = {}
    for k, v in (res or {}).items() if isinstance(res, dict) else ():
        if isinstance(v, dict):
            v = dict(v)
            if "samples" in v:
                v["samples"] = [x for x in v["samples"] or [] if isinstance(x, dict)
                                and isinstance(x.get("t"), (int, float))]
            out[k] = v
        elif k in ("built", "default_size"):
            out[k] = v
    return out


def nums(xs):
    """The numbers of a list (None and the rest left out)."""
    return [x for x in xs or [] if isinstance(x, (int, float)) and not isinstance(x, bool)]


def med(xs):
    xs = nums(xs)
    return statistics.median(xs) if xs else None


def qsize(smp):
    """The size a spindle queue's bound is checked on: queue_size (the facade
    and its spindles) when the harness recorded it, else size (which also
    counts spindle's bookkeeping tables)."""
    v = smp.get("queue_size")
    return v if v is not None else smp.get("size")


def bound_of(run, eps):
    """Issue 9's bound on a spindle queue's size, "backlog + 2 spindles",
    taken literally: at a sample, base + (backlog / eps + 2) x per, with base
    the first sample's size (the facade, its index, the empty queue), per a
    spindle's size, the worker's bytes freed / spindles dropped (heap, TOAST
    and TOAST index), backlog = produced - consumed at the sample.  Returns
    (bound(sample), None), or (None, why it cannot be computed)."""
    samples = run.get("samples") or []
    if not samples or qsize(samples[0]) is None:
        return None, "no samples"
    if not eps:
        return None, "events_per_spindle of the run unknown"
    try:
        dropped, freed = (float(x) for x in (run.get("worker") or "").split())
    except ValueError:
        return None, "no worker figures (spindles dropped, bytes freed)"
    if dropped <= 0:
        return None, "no spindle dropped"
    per, base = freed / dropped, qsize(samples[0])

    def bound(smp):
        backlog = max(0.0, (smp.get("produced") or 0) - (smp.get("consumed") or 0))
        return base + (backlog / eps + 2) * per
    return bound, None


def steady_bound(run, eps):
    """The largest share of the bound over a run's samples: ((size / bound,
    that sample, its bound), None), or (None, why not)."""
    bound, why = bound_of(run, eps)
    if bound is None:
        return None, why
    worst = None
    for smp in run["samples"]:
        if qsize(smp) is None:
            continue
        share = qsize(smp) / bound(smp)
        if worst is None or share > worst[0]:
            worst = (share, smp, bound(smp))
    return (worst, None) if worst else (None, "no sizes in the samples")


def naptime_s(R):
    """spindle.naptime in seconds, from the settings the memory workload
    recorded (rows of [name, setting, unit]), or None."""
    for row in (R.get("memory") or {}).get("settings") or []:
        if row and row[0] == "spindle.naptime" and len(row) > 1:
            unit = row[2] if len(row) > 2 else ""
            scale = {"ms": 0.001, "s": 1.0, "": 1.0, "min": 60.0}.get(unit)
            return float(row[1]) * scale if scale is not None else None
    return None


def back_within(run, eps, end):
    """The first sample at or after t = end whose size is within the steady
    bound of this run (its own worker figures): ((that sample, its bound, the
    gap to the sample before it), None), or (None, why not)."""
    bound, why = bound_of(run, eps)
    if bound is None:
        return None, why
    sm = [x for x in run.get("samples") or [] if qsize(x) is not None]
    for i, smp in enumerate(sm):
        if smp["t"] >= end and qsize(smp) <= bound(smp):
            return (smp, bound(smp), smp["t"] - sm[i - 1]["t"] if i else None), None
    return None, "not back within the bound by the end of the run (t = %s s)" % (
        fmt(sm[-1]["t"]) if sm else "?")


def thirds(xs):
    """The middle and the last third of a list (None, None under 3 items)."""
    n = len(xs)
    return (xs[n // 3:2 * n // 3], xs[2 * n // 3:]) if n >= 3 else (None, None)


def ceiling_bar(k, base, ceil, n):
    """Issue 9's ceiling rule for a target "k times base": the bar is
    k x base, unless k x base is above the commit ceiling times n (the events
    per transaction: no system could pass it), and then 90% of ceiling x n.
    Returns (bar, k x base, 0.9 x ceiling x n or None, whether the ceiling
    binds)."""
    kb = k * base
    if not ceil:
        return kb, kb, None, False
    cb = 0.9 * ceil * n
    return (cb, kb, cb, True) if kb > ceil * n else (kb, kb, cb, False)


def spread(xs):
    xs = nums(xs)
    if not xs:
        return "—"
    m = statistics.median(xs)
    if len(xs) == 1:
        return fmt(m)
    return "%s (%s–%s)" % (fmt(m), fmt(min(xs)), fmt(max(xs)))


def cell(e):
    """A table cell for one configuration: median (min–max), or why not."""
    if not e:
        return "—"
    if e.get("errors") and not nums(e.get("rate")):
        return "failed¹"
    return spread(e.get("rate")) + ("¹" if e.get("errors") else "")


def errors_note(res):
    errs = [(k, str(v["errors"][0])) for k, v in sorted(res.items())
            if isinstance(v, dict) and v.get("errors")]
    if not errs:
        return ""
    return ("\n¹ Runs that failed (not counted in the medians):\n\n" +
            "".join("- `%s` (system|clients|events per transaction): %d failed run(s): `%s`\n"
                    % (k, len(res[k]["errors"]), (e.splitlines() or [""])[0][:400]) for k, e in errs))


def fmt(v, unit=""):
    if v is None:
        return "—"
    if not isinstance(v, (int, float)):
        return str(v)
    if math.isinf(v) or math.isnan(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 100:
        return "%d%s" % (v, unit)
    if abs(v) >= 100:
        s = "{:,.0f}".format(v).replace(",", " ")
    elif abs(v) >= 10:
        s = "%.1f" % v
    else:
        s = "%.2f" % v
    return s + unit


def mib(v):
    return "—" if v is None else "%.2f MiB" % (v / 1048576.0)


def rates(samples, field):
    samples = [s for s in samples or [] if s.get(field) is not None]
    out = []
    for a, b in zip(samples, samples[1:]):
        dt = b["t"] - a["t"]
        if dt > 0:
            out.append(((a["t"] + b["t"]) / 2, (b[field] - a[field]) / dt))
    return out


def series(run, field, scale=1.0):
    """(t, field x scale) of a run's samples, for a plot."""
    return [(s["t"], s[field] * scale) for s in run.get("samples") or [] if s.get(field) is not None]


def window_rate(samples, field, t0, t1):
    pts = [s for s in samples if t0 <= s["t"] <= t1]
    if len(pts) < 2 or pts[-1]["t"] == pts[0]["t"]:
        return None
    return (pts[-1][field] - pts[0][field]) / (pts[-1]["t"] - pts[0]["t"])


def gnuplot(outdir, name, title, ylabel, series, ylog=False, shade=None, multi=None):
    """series: [(label, [(x, y)...])]; multi: [(title, ylabel, series)] panels."""
    datadir = os.path.join(outdir, "data")
    os.makedirs(datadir, exist_ok=True)
    os.makedirs(os.path.join(outdir, PLOTDIR), exist_ok=True)
    panels = multi or [(title, ylabel, series)]
    lines = ["set terminal pngcairo noenhanced size 1000,%d font 'sans,10'" % (420 * len(panels)),
             "set output '%s'" % os.path.join(outdir, PLOTDIR, name),
             "set key outside right top", "set grid", "set xlabel 'time (s)'"]
    if len(panels) > 1:
        lines.append("set multiplot layout %d,1" % len(panels))
    for pi, (ptitle, plabel, pseries) in enumerate(panels):
        lines += ["set title '%s'" % ptitle.replace("'", ""), "set ylabel '%s'" % plabel]
        if shade:
            lines.append("set object 1 rect from %f, graph 0 to %f, graph 1 fc rgb '#dddddd' "
                         "fs solid 0.5 noborder behind" % shade)
        plots = []
        for si, (label, pts) in enumerate(pseries):
            f = os.path.join(datadir, "%s.%d.%d.dat" % (name, pi, si))
            with open(f, "w") as fh:
                for x, y in pts:
                    fh.write("%g %g\n" % (x, y))
            if pts:
                plots.append("'%s' using 1:2 with linespoints pt 7 ps 0.4 lw 2 title '%s'"
                             % (f, label.replace("'", "")))
        if not plots:
            lines.append("set label 1 'no data' at graph 0.5, graph 0.5 center")
            plots.append("NaN notitle")
        lines.append("plot " + ", ".join(plots))
        lines.append("unset label 1")
    if len(panels) > 1:
        lines.append("unset multiplot")
    script = os.path.join(datadir, name + ".gp")
    with open(script, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    r = subprocess.run(["gnuplot", script], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("gnuplot failed for %s: %s" % (name, r.stderr))


def table(head, rows):
    out = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(out) + "\n"


# The targets of issue 9, in the order the summary lists them: (key, what,
# the section that evaluates it).  A target missing from a run (its workload
# did not run, a run failed, its section failed to render) still gets its
# row, "not measured", counted as not met: a missing input never makes a
# target vanish from the count.
EXPECTED = [
    ("enq_heap|1|1", "enqueue 1/txn, 1 client ≥ 1.2x heap queue", "1. Enqueue"),
    ("enq_bare|1|1", "enqueue 1/txn, 1 client ≥ 0.95x bare heap INSERT", "1. Enqueue"),
    ("enq_heap|4|1", "enqueue 1/txn, 4 clients ≥ 1.2x heap queue", "1. Enqueue"),
    ("enq_bare|4|1", "enqueue 1/txn, 4 clients ≥ 0.95x bare heap INSERT", "1. Enqueue"),
    ("enq_heap|1|100", "enqueue batches of 100, 1 client ≥ 1.2x heap queue", "1. Enqueue"),
    ("enq_bare|1|100", "enqueue batches of 100, 1 client ≥ 0.95x bare heap INSERT", "1. Enqueue"),
    ("enq_heap|4|100", "enqueue batches of 100, 4 clients ≥ 1.2x heap queue", "1. Enqueue"),
    ("enq_bare|4|100", "enqueue batches of 100, 4 clients ≥ 0.95x bare heap INSERT", "1. Enqueue"),
    ("deq|4|1", "dequeue 1/txn, 4 consumers ≥ 2.5x heap queue", "2. Dequeue from a backlog"),
    ("deq|1|10", "dequeue 10/txn, 1 consumer ≥ 3x heap queue", "2. Dequeue from a backlog"),
    ("deq|4|10", "dequeue 10/txn, 4 consumers ≥ 3x heap queue", "2. Dequeue from a backlog"),
    ("deq_pgq|1|100", "dequeue 100/txn, 1 consumer ≥ 1.5x PgQ per consumer",
     "2. Dequeue from a backlog"),
    ("wal_enq|1", "WAL per enqueued event ≤ 250 B, one event per transaction", "6. WAL per event"),
    ("wal_enq|100", "WAL per enqueued event ≤ 250 B, batches of 100", "6. WAL per event"),
    ("wal_deq|100", "WAL per dequeued event ≤ 10 B, batches of 100", "6. WAL per event"),
    ("steady_ratio", "steady: spindle's size at the end ≤ heap's (size ratio)", "3. Steady state"),
    ("steady_bound", "steady: spindle's size within backlog + 2 spindles, no VACUUM", "3. Steady state"),
    ("catalogs", "steady: catalogs bounded", "3. Steady state"),
    ("held_rate", "held snapshot: spindle's dequeue rate during the hold ≥ 0.90x before",
     "4. Held snapshot"),
    ("held_back", "held snapshot: spindle's size back within the steady bound within 2 naptimes "
     "after the hold ends", "4. Held snapshot"),
    ("head_flat", "head cost flat within 10% (dequeue)", "5. Head cost"),
    ("cache", "cache on > off (consumer right behind a producer)", "7. Cache on and off"),
]
MET, NOT_MET, NOT_MEASURED, INFO = "**met**", "**not met**", "**not measured**", "informational"


class Targets:
    """The summary's rows.  add(key, ...): ok True (met), False (not met) or
    None (informational: shown, counted neither way).  A key of the form
    "KEY:suffix" is an informational row listed after target KEY."""

    def __init__(self):
        self.rows = []          # (key, what, measured, bar, verdict)

    def add(self, key, what, measured, target, ok, why=None):
        verdict = INFO if ok is None else MET if ok else NOT_MET
        if why and ok is False:
            verdict += ": " + why
        self.rows.append((key, what, measured, target, verdict))

    def unmeasured(self, key, what, why):
        self.rows.append((key, what, why, "", NOT_MEASURED))

    def ordered(self, failed_sections=()):
        """Every expected target once, in EXPECTED's order, then the rest."""
        order = [k for k, _, _ in EXPECTED]
        have = {r[0] for r in self.rows}
        rows = list(self.rows)
        for key, what, section in EXPECTED:
            if key not in have:
                why = ("not evaluated: section \"%s\" failed to render" % section
                       if section in failed_sections else "no figures for it in this run")
                rows.append((key, what, why, "", NOT_MEASURED))

        def pos(r):
            anchor = r[0].split(":")[0]
            return order.index(anchor) if anchor in order else len(order)
        return sorted(rows, key=pos)     # stable: informational rows after their target

    @staticmethod
    def count(rows):
        met = sum(1 for r in rows if r[4] == MET)
        unmeasured = sum(1 for r in rows if r[4] == NOT_MEASURED)
        missed = sum(1 for r in rows if r[4].startswith(NOT_MET)) + unmeasured
        info = sum(1 for r in rows if r[4] == INFO)
        return met, missed, unmeasured, info


def write(R, outdir):
    os.makedirs(outdir, exist_ok=True)
    conf = Conf(R.get("conf") or {})
    enq, deq = runs_of(R.get("enqueue")), runs_of(R.get("dequeue"))
    T = Targets()
    what_of = {k: w for k, w, _ in EXPECTED}
    failed = []         # (what, error): sections and plots that failed to render

    def plot(sec, name, *a, **kw):
        """A plot; one that fails is said in the section, which goes on."""
        try:
            gnuplot(outdir, name, *a, **kw)
        except Exception as e:
            failed.append(("plot " + name, str(e).splitlines()[0][:300] if str(e) else repr(e)))
            sec.append("\nPlot %s failed to render: `%s`\n" % (name, failed[-1][1].replace("`", "'")))

    def er(name, clients, batch, field="rate"):
        return med((enq.get("%s|%d|%d" % (name, clients, batch)) or {}).get(field))

    def dr(name, clients, batch, field="rate"):
        return med((deq.get("%s|%d|%d" % (name, clients, batch)) or {}).get(field))

    def ratio_target(key, s, base, base_label, k, ceil=None, n=None):
        """Target KEY: spindle's s ≥ k x base; with n (events per transaction)
        under the ceiling rule, the row showing both k x base and 90% of the
        ceiling x n."""
        what = what_of[key] + (" (ceiling rule)" if n else "")
        if s is None or not base:
            T.unmeasured(key, what, "not measured: spindle %s, %s %s" % (fmt(s), base_label, fmt(base)))
            return
        measured = "%s vs %s %s (%.2fx)" % (fmt(s), base_label, fmt(base), s / base)
        if not n:
            T.add(key, what, measured, "≥ %s (%gx %s)" % (fmt(k * base), k, base_label), s >= k * base)
            return
        bar, kb, cb, binds = ceiling_bar(k, base, ceil, n)
        measured += ", ceiling %s" % fmt(ceil)
        if cb is None:
            target = "≥ %s (%gx %s; the ceiling was not measured)" % (fmt(bar), k, base_label)
        else:
            target = "≥ %s: %gx %s = %s, 90%% of the ceiling x %d = %s; %s" % (
                fmt(bar), k, base_label, fmt(kb), n, fmt(cb),
                "the ceiling binds" if binds else "%gx %s applies" % (k, base_label))
        T.add(key, what, measured, target, s >= bar)

    # ---- 1. enqueue
    def sec_enqueue():
        sec = ["## 1. Enqueue\n",
               "Events/s, median of %s runs of %s s (min–max), pgbench -M prepared, one event per "
               "transaction or batches of 100 per transaction; a fresh queue for each run. The commit "
               "ceiling is a one-row `INSERT INTO ceiling VALUES (1)` per transaction (an int column, "
               "no index).\n" % (fmt(conf["rounds"]), fmt(conf["secs"]))]
        cfgs = [(c, b) for c in ints(conf["enqueue_clients"]) for b in ints(conf["enqueue_batches"])]
        if enq:
            rows = []
            for name in ["ceiling", "spindle", "spindle_sql", "heap", "bare_heap", "pgq", "partman"]:
                row = [ENQ_LABEL[name]]
                for c, b in cfgs:
                    row.append(cell(enq.get("%s|%d|%d" % (name, c, b))))
                rows.append(row)
            sec.append(table(["system"] + ["%d client%s, %s" % (c, "s" if c > 1 else "",
                                                                "1/txn" if b == 1 else "%d/txn" % b)
                                           for c, b in cfgs], rows))
            sec.append(errors_note(enq))
            dflt = [med(v.get("in_default")) for k, v in enq.items() if k.startswith("partman")]
            if any(dflt):
                sec.append("\npg_partman: events that landed in the default partition (premake too "
                           "short): %s.\n" % ", ".join(fmt(x) for x in dflt))
            for c in (1, 4):
                for b in (1, 100):
                    ceil, sp = er("ceiling", c, 1), er("spindle", c, b)
                    ratio_target("enq_heap|%d|%d" % (c, b), sp, er("heap", c, b), "heap queue",
                                 1.2, ceil, b)
                    ratio_target("enq_bare|%d|%d" % (c, b), sp, er("bare_heap", c, b),
                                 "bare heap INSERT", 0.95, ceil, b)
        else:
            sec.append("Not run.\n")
        return sec

    # ---- 2. dequeue
    def sec_dequeue():
        sec = ["## 2. Dequeue from a backlog\n",
               "Events/s consumed from a backlog of %s events (filled before each run), median of %s "
               "runs (min–max). Each run: a warm-up that consumes 5%% of the backlog, then a measured "
               "run of a fixed number of calls per consumer, set from the warm-up's rate so that it "
               "would take %s s, but at most 80%% of the backlog left after the warm-up: a run ends "
               "at about %s s or when 80%% of the backlog is consumed, whichever comes first (a fast "
               "system's batch runs are therefore shorter; a run never finds the queue empty). "
               "events/s = events removed (backlog before − after) / pgbench's time. "
               "PgQ: one consumer (PgQ consumers are subscriptions that each receive every event), "
               "batches made by one tick every N events.\n"
               % (fmt(conf["backlog"]), fmt(conf["rounds"]), fmt(conf["secs"]), fmt(conf["secs"]))]
        dcfgs = sorted({tuple(ints(k.split("|")[1:])) for k in deq if len(ints(k.split("|")[1:])) == 2})
        if deq:
            rows = []
            for name in ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman", "ceiling"]:
                row = [LABEL[name] + (" (commits/s, each round among these runs)"
                                      if name == "ceiling" else "")]
                for c, b in dcfgs:
                    row.append(cell(deq.get("%s|%d|%d" % (name, c, b))))
                rows.append(row)
            sec.append(table(["system"] + ["%d consumer%s, %d/call" % (c, "s" if c > 1 else "", b)
                                           for c, b in dcfgs], rows))
            sec.append(errors_note(deq))
            if any(v.get("secs") for v in deq.values()):
                rows = []
                for name in ["spindle", "spindle_ra", "spindle_sql", "heap", "pgq", "partman"]:
                    rows.append([LABEL[name]] + [spread((deq.get("%s|%d|%d" % (name, c, b)) or {})
                                                        .get("secs")) for c, b in dcfgs])
                sec.append("\nMeasured duration of each run (s), median (min–max):\n" + table(
                    ["system"] + ["%d consumer%s, %d/call" % (c, "s" if c > 1 else "", b)
                                  for c, b in dcfgs], rows))
            short = [(k, max(nums(v.get("short")))) for k, v in deq.items()
                     if nums(v.get("short")) and max(nums(v.get("short"))) > 0]
            if short:
                sec.append("\nRuns where calls returned fewer events than asked (events short): %s.\n"
                           % ", ".join("%s %s" % (k, fmt(v)) for k, v in short))
            # the ceiling measured among the dequeue runs (each round), else
            # the enqueue workload's
            def dceil(c):
                v = dr("ceiling", c, 1)
                return v if v else er("ceiling", c, 1)
            ratio_target("deq|4|1", dr("spindle", 4, 1), dr("heap", 4, 1), "heap queue", 2.5,
                         dceil(4), 1)
            for c in (1, 4):
                ratio_target("deq|%d|10" % c, dr("spindle", c, 10), dr("heap", c, 10), "heap queue", 3,
                             dceil(c), 10)
            ratio_target("deq_pgq|1|100", dr("spindle", 1, 100), dr("pgq", 1, 100),
                         "PgQ per consumer", 1.5)
        else:
            sec.append("Not run.\n")
        return sec

    # ---- 3. steady
    def sec_steady():
        st = runs_of(R.get("steady"))
        sec = ["## 3. Steady state\n",
               "2 producers at %s events/s in all (one event per transaction, pgbench -R) and 2 consumers "
               "(10 events per call, at most 1.5x the produce rate; PgQ: one consumer, a batch per tick, "
               "the ticker every %s s and pgq's maintenance every %s s; pg_partman: "
               "run_maintenance every %s s, partitions of %s ids, retention %s ids) for %s s, each "
               "system %s in a database of its own, autovacuum at its defaults, the spindle worker on; "
               "spindle queues and tables with events_per_spindle = %s. Sampled every %s s. Size: "
               "everything the queue owns (the table, its indexes and TOAST; spindle: the facade, "
               "every spindle (`spindle.tables.size_bytes`) and spindle's directory tables "
               "`spindle.spindle_catalog` and `spindle.table_catalog`; partman: every partition; "
               "PgQ: every table of schema pgq, its tick and subscription tables too). PgQ "
               "truncates an event table once rotation has passed it: it runs with "
               "rotation_period = %s (its default, 2 hours, would not rotate in this run). "
               "VACUUMs: autovacuums of the queue's own tables, counted from the server log "
               "(log_autovacuum_min_duration = 0); those of its bookkeeping tables (spindle's "
               "directory, partman's config, none for the others) are listed apart. "
               "Catalogs: pg_total_relation_size of %s, summed.\n"
               % (fmt(conf["steady_rate"]), conf["pgq_tick_every"], conf["pgq_maint_every"],
                  conf["partman_every"], fmt(conf["partman_interval"]), fmt(conf["partman_retention"]),
                  fmt(conf["steady_secs"]), "side by side with the others (short mode)"
                  if conf["steady_parallel"] else "alone", conf["events_per_spindle_steady"],
                  conf["sample"], conf.get("pgq_rotation", "2 hours"), ", ".join(CATALOGS))]
        eps = conf["events_per_spindle_steady"]
        names = [n for n in STEADY_ORDER if n in st]

        def vals(sm, field):
            return [x[field] for x in sm if x.get(field) is not None]

        def ratio(a, b):
            return "%.2f" % (a / b) if a is not None and b else "—"
        if st:
            rows = []
            for n in names:
                sm = st[n].get("samples") or []
                if not sm:
                    rows.append([LABEL[n]] + ["—"] * 10)
                    continue
                half = sm[len(sm) // 2]["t"]
                m1 = max(vals([x for x in sm if x["t"] <= half], "size") or [None], key=lambda v: v or 0)
                m2 = max(vals([x for x in sm if x["t"] > half], "size") or [None], key=lambda v: v or 0)
                c1 = max(vals([x for x in sm if x["t"] <= half], "catalog") or [None], key=lambda v: v or 0)
                c2 = max(vals([x for x in sm if x["t"] > half], "catalog") or [None], key=lambda v: v or 0)
                dur = sm[-1]["t"] - sm[0]["t"] or 1
                last = sm[-1]
                rows.append([LABEL[n], fmt((last.get("produced") or 0) / dur),
                             fmt((last.get("consumed") or 0) / dur),
                             fmt((last.get("produced") or 0) - (last.get("consumed") or 0)),
                             mib(last.get("size")), mib(max(vals(sm, "size") or [None], key=lambda v: v or 0)),
                             ratio(m2, m1), fmt(st[n].get("vacuums")),
                             fmt((st[n].get("autovacuums") or {}).get("bookkeeping")),
                             mib(sm[0].get("catalog")), mib(last.get("catalog")), ratio(c2, c1)])
            sec.append("\nThe target's bound on spindle's size is issue 9's \"backlog + 2 spindles\" "
                       "taken literally: at each sample, base + (b / %s + 2) x per, where base is the "
                       "size of the first sample (the facade, its index, the empty queue), per is a "
                       "spindle's size, the bytes the worker freed per spindle it dropped, and b is the "
                       "backlog at that sample (produced − consumed); %s is events_per_spindle. It is "
                       "checked on %s. Catalogs bounded: the largest catalog size in the last third of "
                       "the samples at most 1.05x the largest in the middle third (the table's \"2nd/1st "
                       "half\" column is for information).\n"
                       % (eps, eps, "the facade and its spindles only (`queue_size`, without spindle's "
                          "bookkeeping tables, which `size` includes)"
                          if any("queue_size" in x for n in names for x in st[n].get("samples") or [])
                          else "the size in the table"))
            sec.append(table(["system", "produced/s", "consumed/s", "backlog at end", "size at end",
                              "max size", "max 2nd half / 1st half", "VACUUMs of it",
                              "VACUUMs of its bookkeeping", "catalogs at start", "catalogs at end", "catalogs 2nd/1st half"], rows))
            sec.append("\n![size over time](benchmarks/steady_size.png)\n\n![throughput over time]"
                       "(benchmarks/steady_throughput.png)\n\n![catalog size over time](benchmarks/steady_catalog.png)\n")
            notes = []
            for n in names:
                if st[n].get("worker"):
                    notes.append("%s: the spindle worker dropped %s spindles (%s bytes) in its database"
                                 % (LABEL[n], *(st[n]["worker"].split() + ["?", "?"])[:2]))
                if n in ("spindle_ra", "spindle_sql"):
                    (w, why) = steady_bound(st[n], eps)
                    notes.append("%s, for information: largest share of the same bound %s" % (
                        LABEL[n], "%.2f (%s against %s at t = %s s)" % (
                            w[0], mib(qsize(w[1])), mib(w[2]), fmt(w[1]["t"])) if w else
                        "not computed: " + why))
                if st[n].get("in_default"):
                    notes.append("%s: %s events in the default partition" % (LABEL[n],
                                                                           fmt(st[n]["in_default"])))
                if st[n].get("errors"):
                    notes.append("%s: sampling errors: %s" % (LABEL[n], st[n]["errors"][0]))
            if notes:
                sec.append("\n" + "\n".join("- " + x for x in notes) + "\n")
        else:
            sec.append("Not run.\n")
        end = {n: st[n]["samples"][-1].get("size") for n in names if st[n].get("samples")}
        if end.get("spindle") is not None and end.get("heap"):
            r = end["spindle"] / end["heap"]
            T.add("steady_ratio", what_of["steady_ratio"],
                  "%s vs %s: ratio %.2f%s" % (mib(end["spindle"]), mib(end["heap"]), r,
                                              "".join(", vs %s %.2f" % (LABEL[o], end["spindle"] / end[o])
                                                      for o in ("pgq", "partman") if end.get(o))),
                  "≤ 1.00", r <= 1.0)
        if "spindle" in st:
            run = st["spindle"]
            vac = run.get("vacuums")
            w, why = steady_bound(run, eps)
            if w:
                share, smp, lim = w
                T.add("steady_bound", what_of["steady_bound"],
                      "largest share of the bound %.2f (%s against %s at t = %s s); %s VACUUMs"
                      % (share, mib(qsize(smp)), mib(lim), fmt(smp["t"]), fmt(vac)),
                      "≤ 1.00, 0 VACUUMs", share <= 1.0 and vac == 0)
            else:
                T.add("steady_bound", what_of["steady_bound"], "the bound cannot be computed: %s; "
                      "%s VACUUMs" % (why, fmt(vac)), "≤ 1.00, 0 VACUUMs", False, why=why)
            mid, last = thirds(vals(run.get("samples") or [], "catalog"))
            what = ("steady: catalogs bounded with events_per_spindle = %s (max of the last third of "
                    "the samples ≤ 1.05x max of the middle third)" % eps)
            if mid and last:
                T.add("catalogs", what, "%s vs %s (%.2fx); %s at the start" % (
                    mib(max(last)), mib(max(mid)), max(last) / max(mid) if max(mid) else 0,
                    mib(run["samples"][0].get("catalog"))), "≤ 1.05x", max(last) <= 1.05 * max(mid))
            else:
                T.unmeasured("catalogs", what, "not measured: fewer than 3 catalog samples")
        if st:
            plot(sec, "steady_size.png", "Steady state: size on disk", "MiB",
                 [(LABEL[n], series(st[n], "size", 1 / 1048576.0)) for n in names])
            plot(sec, "steady_throughput.png", "", "", [], multi=[
                ("Steady state: produced events/s", "events/s",
                 [(LABEL[n], rates(st[n].get("samples"), "produced")) for n in names]),
                ("Steady state: consumed events/s", "events/s",
                 [(LABEL[n], rates(st[n].get("samples"), "consumed")) for n in names])])
            plot(sec, "steady_catalog.png",
                 "Steady state: pg_class + pg_attribute + pg_type + pg_depend", "MiB",
                 [(LABEL[n], series(st[n], "catalog", 1 / 1048576.0)) for n in names])
        return sec

    # ---- 4. held snapshot
    def sec_held_snapshot():
        hd = runs_of(R.get("held"))
        hw = R.get("held_window") or [conf["held_start"], conf["held_hold"]]
        if len(nums(hw)) != 2:
            raise ValueError("no held window (held_window, conf held_start, held_hold): %r" % (hw,))
        h0, h1 = hw[0], hw[0] + hw[1]
        eps = conf["events_per_spindle_steady"]
        nap = naptime_s(R)
        sec = ["## 4. Held snapshot\n",
               "The steady run again (%s s) with a REPEATABLE READ transaction (`BEGIN ISOLATION LEVEL "
               "REPEATABLE READ; SELECT 1; SELECT pg_sleep(%s)`) held open in the queue's database "
               "for %s s, from t = %s s to t = %s s of the %s s run (shaded in the plots). "
               "Back within the steady bound (spindle's queues): the time from the hold's end to the "
               "first sample at or after it whose size is within the bound of section 3 (computed "
               "with that run's own worker figures); the target is at most 2 naptimes (spindle.naptime "
               "= %s s). Back to 1.25x + 1 MiB (every system, for information): the first sample "
               "after the hold ends whose size is at most 1.25x the largest size before the hold "
               "(+ 1 MiB).\n" % (fmt(conf.get("held_secs")), fmt(hw[1]), fmt(hw[1]), fmt(h0), fmt(h1),
                                  fmt(conf.get("held_secs")), fmt(nap))]
        hnames = [n for n in STEADY_ORDER if n in hd]
        rates_of = {}
        if hd:
            rows = []
            for n in hnames:
                sm = [x for x in hd[n].get("samples") or [] if x.get("size") is not None]
                if not sm:
                    rows.append([LABEL[n]] + ["—"] * 8)
                    continue
                before = [x["size"] for x in sm if x["t"] <= h0]
                loose = 1.25 * max(before or [0]) + 1048576
                during = [x["size"] for x in sm if h0 < x["t"] <= h1 + (conf["sample"] or 0)]
                back = next((x["t"] - h1 for x in sm if x["t"] > h1 and x["size"] <= loose), None)
                rb = window_rate(sm, "consumed", 0, h0)
                rd = window_rate(sm, "consumed", h0, h1)
                ra = window_rate(sm, "consumed", h1, sm[-1]["t"])
                rates_of[n] = (rb, rd)
                if n.startswith("spindle"):
                    w, why = back_within(hd[n], eps, h1)
                    inb = "%s s" % fmt(w[0]["t"] - h1) if w else why
                else:
                    inb = "—"
                rows.append([LABEL[n], fmt(rb), fmt(rd), fmt(ra), mib(max(before or [0])),
                             mib(max(during or [0])), mib(sm[-1]["size"]), inb,
                             "%s s" % fmt(back) if back is not None else "not within the run"])
            sec.append(table(["system", "consumed/s before", "consumed/s during", "consumed/s after",
                              "max size before", "max size during", "size at end",
                              "back within the steady bound after", "back to 1.25x + 1 MiB after"],
                             rows))
            sec.append("\n![size over time, snapshot held](benchmarks/held_size.png)\n\n![consumed events/s, "
                       "snapshot held](benchmarks/held_throughput.png)\n")
            win = {n: hd[n]["windows"] for n in hnames if isinstance(hd[n].get("windows"), dict)}
            if win:
                sec.append("\nThe consumers' calls in each window (before, during and after the hold): "
                           "events per busy second = events / the sum of the calls' service times "
                           "(pgbench's schedule lag left out), the dequeue rate of the held-snapshot "
                           "target.\n")
                rows = []
                for n in hnames:
                    for wname in ("before", "during", "after"):
                        e = (win.get(n) or {}).get(wname) or {}
                        calls, events, busy = e.get("calls"), e.get("events"), e.get("busy_s")
                        rows.append([LABEL[n], wname, fmt(calls), fmt(events),
                                     "%.3f" % (busy * 1000.0 / calls) if busy is not None and calls else "—",
                                     fmt(events / busy) if events is not None and busy else "—"])
                sec.append(table(["system", "window", "calls", "events", "mean ms per call",
                                  "events per busy second"], rows))
            plot(sec, "held_size.png", "Held snapshot: size on disk", "MiB",
                 [(LABEL[n], series(hd[n], "size", 1 / 1048576.0)) for n in hnames], shade=(h0, h1))
            plot(sec, "held_throughput.png", "Held snapshot: consumed events/s", "events/s",
                 [(LABEL[n], rates(hd[n].get("samples"), "consumed")) for n in hnames], shade=(h0, h1))
        else:
            sec.append("Not run.\n")

        # the held rate: events per busy second of the consumers, during / before
        def busy_rate(n, wname):
            e = ((hd.get(n) or {}).get("windows") or {}).get(wname) or {}
            return e["events"] / e["busy_s"] if e.get("events") is not None and e.get("busy_s") else None
        if "spindle" in hd:
            rb, rd = busy_rate("spindle", "before"), busy_rate("spindle", "during")
            if rb and rd is not None:
                T.add("held_rate", what_of["held_rate"] + " (events per busy second of the consumers)",
                      "%s / %s = %.2f" % (fmt(rd), fmt(rb), rd / rb), "≥ 0.90", rd >= 0.9 * rb)
                hr = busy_rate("heap", "during")
                if hr:
                    T.add("held_rate:heap", "held snapshot: spindle's events per busy second during the "
                          "hold vs heap's (informational)", "%s vs %s: %.2fx" % (fmt(rd), fmt(hr), rd / hr),
                          "none (not a target)", None)
            else:
                T.unmeasured("held_rate", what_of["held_rate"],
                             "not measured: no per-call timing of the consumers (windows) in this run; "
                             "the consumers are throttled to 1.5x the producer, so consumed/s follows "
                             "the producer and is no evidence")
            rb, rd = rates_of.get("spindle", (None, None))
            if rb and rd is not None and not hd["spindle"].get("windows"):
                T.add("held_rate:consumed", "held snapshot: spindle's consumed/s during the hold / before "
                      "(informational: the consumers are throttled)", "%s / %s = %.2f" % (
                          fmt(rd), fmt(rb), rd / rb), "none (not a target)", None)
                hr = rates_of.get("heap", (None, None))[1]
                if hr:
                    T.add("held_rate:consumed heap", "held snapshot: spindle's consumed/s during the hold "
                          "vs heap's (informational)", "%s vs %s: %.2fx" % (fmt(rd), fmt(hr), rd / hr),
                          "none (not a target)", None)

            # the slot map (facade's main fork): it grows with the backlog
            # and is truncated once the drained spindles' ranges are retired
            ms = [x for x in hd["spindle"].get("samples") or [] if x.get("map_size") is not None]
            if ms:
                mb = [x["map_size"] for x in ms if x["t"] <= h0]
                md = [x["map_size"] for x in ms if h0 < x["t"] <= h1]
                back = next((x["t"] - h1 for x in ms
                             if x["t"] >= h1 and x["map_size"] <= max(mb or [0])), None)
                T.add("held_back:map", "held snapshot: spindle's slot map (the facade's main fork) "
                      "before the hold, at most during it, at the end",
                      "%s, %s, %s (back to its size before the hold %s)" % (
                          mib(max(mb or [0])), mib(max(md or [0])), mib(ms[-1]["map_size"]),
                          "%s s after the hold" % fmt(back) if back is not None else "not within the run"),
                      "none (not a target)", None)

            # back within the steady bound within 2 naptimes after the hold
            what = what_of["held_back"]
            w, why = back_within(hd["spindle"], eps, h1)
            if nap is None:
                T.unmeasured("held_back", what, "not measured: spindle.naptime is not in this run's "
                             "settings (section 8)")
            elif w is None:
                T.add("held_back", what, why, "≤ %s s (2 naptimes)" % fmt(2 * nap), False,
                      why="no spindle dropped" if why == "no spindle dropped" else "not back")
            else:
                smp, lim, gap = w
                back = smp["t"] - h1
                T.add("held_back", what, "%s s after the hold ended at t = %s s (%s against a bound of "
                      "%s at t = %s s%s)" % (fmt(back), fmt(h1), mib(qsize(smp)), mib(lim), fmt(smp["t"]),
                                             "; the sample before it %s s earlier" % fmt(gap)
                                             if gap is not None else ""),
                      "≤ %s s (2 naptimes)" % fmt(2 * nap), back <= 2 * nap)
        return sec

    # ---- 5. head cost
    def sec_head_cost():
        hc = runs_of(R.get("head"))
        kinds = list(dict.fromkeys(k.split("|")[0] for k in hc))
        ks = sorted(set(ints(conf["head_backlogs"])) | set(ints(k.split("|")[-1] for k in hc)))
        txns, rounds = conf["head_txns"], conf.get("head_rounds") or conf["rounds"]
        grow = rounds * max(len(kinds), 1) * txns if txns and rounds else None
        sec = ["## 5. Head cost\n",
               "Mean latency (ms) of one call consuming one event, pgbench -t %s, one client, median of "
               "%s runs, with K consumed-but-not-dropped events ahead of the head (enqueued and dequeued "
               "before, the spindle worker off so that their spindles stay). Each K has a database of "
               "its own, all built before the first measured run; each round then measures every K in "
               "turn, starting from a different one, so that a drift of the disk's flush time lands on "
               "every K alike. Each measured run consumes head_txns = %s events of its database, and "
               "with the worker off they stay ahead of the head too: during the measurement K grows "
               "by up to rounds x kinds of call x head_txns = %s x %d x %s = %s events (K = 0 is 0 to "
               "%s).%s The target: the largest of the dequeue's medians over every K at most 1.10x the "
               "smallest.\n"
               % (txns, rounds, fmt(txns), rounds, len(kinds), fmt(txns), fmt(grow), fmt(grow),
                  " The row *dequeue, no flush* is the same dequeue with `synchronous_commit = off`: "
                  "it leaves out the wait for the commit's WAL flush; it is shown for information, "
                  "not as a target." if "dequeue, no flush" in kinds else "")]
        if hc:
            rows = []
            for kind in kinds:
                row = [kind]
                for k in ks:
                    e = hc.get("%s|%d" % (kind, k))
                    row.append(("%s ms (%s spindles)" % (spread(e.get("lat")), fmt(e.get("spindles"))))
                               if e else "—")
                rows.append(row)
            sec.append(table(["call"] + ["K = %s" % fmt(k) for k in ks], rows))
        else:
            sec.append("Not run.\n")
        for kind in ("dequeue", "dequeue, no flush"):
            key = "head_flat" if kind == "dequeue" else "head_flat:no flush"
            what = "head cost flat within 10%% (%s, K = %s .. %s; max / min over every K)" % (
                kind, fmt(ks[0]) if ks else "?", fmt(ks[-1]) if ks else "?")
            lat = {k: med((hc.get("%s|%d" % (kind, k)) or {}).get("lat")) for k in ks}
            missing = [k for k in ks if lat[k] is None]
            if kind != "dequeue" and all(lat[k] is None for k in ks):
                continue            # an older run without this row
            if missing or len(ks) < 2:
                if kind == "dequeue":
                    T.unmeasured(key, what, "not measured at K = %s" % (
                        ", ".join(fmt(k) for k in missing) or "(fewer than 2 K)"))
                continue
            lo = min(ks, key=lambda k: lat[k])
            hi = max(ks, key=lambda k: lat[k])
            ratio = lat[hi] / lat[lo] if lat[lo] else float("inf")
            T.add(key, what if kind == "dequeue" else
                  "head cost, dequeue without the commit's flush (informational, not a target)",
                  "min %.3f ms at K = %s, max %.3f ms at K = %s (%.2fx); %s" % (
                      lat[lo], fmt(lo), lat[hi], fmt(hi), ratio,
                      ", ".join("K = %s: %.3f" % (fmt(k), lat[k]) for k in ks)),
                  "max / min ≤ 1.10" if kind == "dequeue" else "none (not a target)",
                  (ratio <= 1.10) if kind == "dequeue" else None)
        return sec

    # ---- 6. WAL
    def sec_wal():
        sec = ["## 6. WAL per event\n",
               "Bytes of WAL per event (pg_current_wal_insert_lsn before and after each measured run, "
               "divided by the events it enqueued or consumed; includes commit records and whatever "
               "autovacuum and the spindle worker wrote meanwhile), medians.\n"]
        def dwal(name, b):
            """Dequeue WAL per event: 1 consumer, or 4 where 1 was not run."""
            w = med(deq.get("%s|1|%d" % (name, b), {}).get("wal"))
            return w if w is not None else med(deq.get("%s|4|%d" % (name, b), {}).get("wal"))

        rows = []
        for name in ["spindle", "spindle_ra", "spindle_sql", "heap", "bare_heap", "pgq", "partman"]:
            row = [LABEL[name] if name != "spindle" else "spindle (enqueue / dequeue)"]
            for b in (1, 100):
                row.append(fmt(med(enq.get("%s|1|%d" % (name, b), {}).get("wal"))))
            for b in (1, 10, 100):
                row.append(fmt(dwal(name, b)))
            rows.append(row)
        sec.append(table(["system", "enqueue 1/txn", "enqueue 100/txn", "dequeue 1/call",
                          "dequeue 10/call", "dequeue 100/call"], rows))
        sec.append("\n(enqueue: 1 client; dequeue: 1 consumer, or 4 where 1 was not run)\n")
        # Issue 9: "WAL per enqueued event at most 250 bytes; per dequeued
        # event at most 10 bytes in batches of 100": "in batches of 100"
        # belongs to the dequeue clause, so the enqueue target is the 1/txn
        # row; the batch row is kept as a second target row, named as such.
        for b, what in ((1, "one event per transaction (the issue's target)"),
                        (100, "batches of 100 (a second row: the issue's bar read for batches)")):
            key = "wal_enq|%d" % b
            w = med(enq.get("spindle|1|%d" % b, {}).get("wal"))
            if w is None:
                T.unmeasured(key, what_of[key], "not measured: no WAL figure for spindle|1|%d" % b)
            else:
                T.add(key, "WAL per enqueued event ≤ 250 B, %s" % what, fmt(w, " B"), "≤ 250 B",
                      w <= 250)
        # the same runs by record type (pg_walinspect): what each event costs
        recs = {}
        for name in ["spindle", "spindle_sql", "heap", "bare_heap"]:
            per_round = [x for x in enq.get("%s|1|1" % name, {}).get("records") or [] if x]
            kinds = sorted({k for x in per_round for k in x})
            for k in kinds:
                vals = [x.get(k, [0, 0, 0]) for x in per_round]
                recs.setdefault(name, []).append(
                    (k, med([v[0] for v in vals]), med([v[1] for v in vals]),
                     med([v[2] for v in vals])))
        if recs:
            sec.append("\nThe enqueue runs of one event per transaction (1 client) by WAL record type "
                       "(`pg_walinspect`'s `pg_get_wal_stats` over the measured run, per event enqueued, "
                       "medians over the rounds; record bytes without the WAL's 8-byte alignment and "
                       "page headers, which the figures above include):\n")
            rows = []
            for name, kinds in recs.items():
                for k, n, rec, fpi in sorted(kinds, key=lambda x: -(x[2] or 0)):
                    if (n or 0) < 0.001:
                        continue
                    rows.append([ENQ_LABEL[name], k, "%.3f" % n, fmt(rec), fmt(fpi)])
            sec.append(table(["system", "record", "records per event", "record bytes per event",
                              "page image bytes per event"], rows))
            mine = [(k, rec) for k, n, rec, fpi in recs.get("spindle", []) if (n or 0) >= 0.01]
            if mine:
                T.add("wal_enq|1:records", "WAL per enqueued event, one event per transaction, by "
                      "record type (spindle)", ", ".join("%s %s B" % (k, fmt(rec)) for k, rec in
                                                          sorted(mine, key=lambda x: -(x[1] or 0))),
                      "none (not a target)", None)
        w = dwal("spindle", 100)
        if w is None:
            T.unmeasured("wal_deq|100", what_of["wal_deq|100"], "not measured: no WAL figure for "
                         "spindle's dequeue of 100")
        else:
            T.add("wal_deq|100", what_of["wal_deq|100"], fmt(w, " B"), "≤ 10 B", w <= 10)
        return sec

    # ---- 7. cache
    def sec_cache():
        ca = runs_of(R.get("cache"))
        sec = ["## 7. Cache on and off\n",
               "A consumer right behind a producer, for %s s: one producer (`spindle.enqueue`, one "
               "per transaction) at %s events/s and one consumer (`spindle.dequeue` of 10) at "
               "0.15 calls per event produced (pgbench -R: room to spare, so both modes do the same "
               "work), with the cache at its default and with `spindle.cache_size = 0` (after a "
               "restart); medians of %s runs. Measured from 2 s after the start to 1 s before the "
               "end: the events consumed and the user CPU time (from /proc) of the consumer's "
               "backend; its system time, mostly the kernel's work in the commit's WAL write and "
               "fdatasync (which the cache cannot change), is shown apart.\n"
               % (fmt(conf["cache_secs"]), fmt(conf.get("cache_rate", "?")), fmt(conf["rounds"]))]
        what = what_of["cache"]
        if not ca:
            sec.append("Not run.\n")
        elif not ca.get("built"):
            sec.append("\ncache: not built (this build has no `spindle.cache_size` setting).\n")
            T.unmeasured("cache", what, "not measured: cache: not built")
        elif all(ca.get(m, {}).get("cpu_s") and ca.get(m, {}).get("consumed") for m in ("on", "off")):
            # per round: the consumer backend's CPU seconds and the events it
            # consumed in the same window; the target is the median of
            # events per CPU second (what the cache saves is the consumer's
            # work, which its rate alone does not show: review A6)
            def per_cpu(e):
                return [c / t for c, t in zip(e["consumed"], e["cpu_s"]) if c is not None and t]

            def per_sec(e):
                secs = e.get("secs") or [max(1, (conf.get("cache_secs") or 4) - 3)] * len(e["consumed"])
                return [c / t for c, t in zip(e["consumed"], secs) if c is not None and t]
            cpu = "user CPU" if any(ca[m].get("sys_s") for m in ("on", "off")) else "CPU"
            sec.append("\nEvents per %s second: per round, the events the consumer consumed / the %s "
                       "seconds of its backend in the same window; the target compares their medians.\n"
                       % (cpu, cpu))
            rows = []
            for mode in ("on", "off"):
                e = ca[mode]
                rows.append(["%s (cache_size = %s)" % (mode, ca.get("default_size") if mode == "on" else 0),
                             spread(e.get("produced")), spread(per_sec(e)), spread(e.get("cpu_s")),
                             spread(e.get("sys_s")), spread(per_cpu(e)), spread(e.get("lat")),
                             " ".join(str(x) for x in (e.get("stats") or [["—"]])[-1])])
            sec.append(table(["cache", "produced/s", "consumed/s", "consumer %s s" % cpu,
                              "consumer system CPU s", "events per %s second" % cpu,
                              "dequeue latency (ms)",
                              "cache_stats hits misses (before, after)"], rows))
            on, off = med(per_cpu(ca["on"])), med(per_cpu(ca["off"]))
            if on is not None and off is not None:
                T.add("cache", what + ": events per %s second of the consumer's backend" % cpu,
                      "%s vs %s events per %s second (%.2fx)" % (fmt(on), fmt(off), cpu,
                                                                on / off if off else 0),
                      "on > off", on > off)
        else:
            rows = []
            for mode in ("on", "off"):
                e = ca.get(mode, {})
                rows.append(["%s (cache_size = %s)" % (mode, ca.get("default_size") if mode == "on" else 0),
                             spread(e.get("consumed")), spread(e.get("produced")), spread(e.get("lat")),
                             " ".join(str(x) for x in (e.get("stats") or [["—"]])[-1])])
            sec.append(table(["cache", "consumed/s", "produced/s", "dequeue latency (ms)",
                              "cache_stats hits misses (before, after)"], rows))
            sec.append("\nThe consumer drains what the producer writes, so its consumed/s is the "
                       "producer's rate (plus the prefilled events / the run's length), set by the "
                       "CPU the two share: it is no evidence for the cache, and the target is not "
                       "measured in this run (it needs the consumer's CPU time).\n")
            T.unmeasured("cache", what, "not measured: no consumer CPU time in this run; consumed/s "
                         "(%s on, %s off) follows the producer" % (
                             fmt(med(ca.get("on", {}).get("consumed"))),
                             fmt(med(ca.get("off", {}).get("consumed")))))
        return sec

    # ---- 8. memory
    def sec_memory():
        mem = R.get("memory") if isinstance(R.get("memory"), dict) else {}

        def allocs(rows):
            """pg_shmem_allocations rows [name, size, allocated_size]: {name: (size, allocated)}."""
            out = {}
            for r in rows or []:
                try:
                    out[str(r[0])] = (float(r[1]), float(r[2]))
                except (TypeError, ValueError, IndexError):
                    pass
            return out
        sec = ["## 8. Memory\n",
               "Shared memory spindle allocates (`pg_shmem_allocations` where the name contains "
               "'spindle'), at the defaults of this run.\n"]
        if mem:
            dflt, off = allocs(mem.get("default")), allocs(mem.get("cache_off"))
            rows = []
            for k in sorted(dflt):
                rows.append([k, fmt(dflt[k][0]), fmt(dflt[k][1]), fmt(off[k][1]) if k in off else "—"])
            total = sum(r[1] for r in dflt.values())
            rows.append(["**total**", "", fmt(total),
                         fmt(sum(r[1] for r in off.values())) if off else "—"])
            sec.append(table(["allocation", "size (bytes)", "allocated (bytes)",
                              "allocated with cache_size = 0"], rows))
            sec.append("\nTotal: %s MiB at the defaults.\n" % ("%.2f" % (total / 1048576.0)))
            if off:
                diff = total - sum(r[1] for r in off.values())
                # the cache is spindle.cache_tables table slots of
                # spindle.cache_size entries each (src/cache.c): per cached
                # table is the cache's memory / cache_tables
                setting = {r[0]: r[1] for r in mem.get("settings") or [] if r and len(r) > 1}
                ntab = str(setting.get("spindle.cache_tables") or "")
                sec.append("The cache takes %s bytes at the defaults%s.\n" % (
                    fmt(diff), "; spindle.cache_tables = %s: %s bytes per cached table (spindle.cache_size = %s "
                    "entries, payloads up to spindle.cache_payload_size = %s B)" % (
                        ntab, fmt(diff / float(ntab)), setting.get("spindle.cache_size", "?"),
                        setting.get("spindle.cache_payload_size", "?"))
                    if ntab.isdigit() and int(ntab) > 0 else ""))
            else:
                sec.append("Per cached table: cache: not built.\n")
            sec.append("\nSettings of spindle in this run:\n\n" + table(
                ["setting", "value", "unit"], [r for r in mem.get("settings") or [] if r]))
        else:
            sec.append("Not run.\n")
        return sec

    # ---- the machine, the settings, how to run
    m = R.get("machine") or {}

    def sec_machine():
        return ["## Machine and settings\n",
                table(["", ""], [
                    ["CPUs (nproc)", m.get("nproc", "?")], ["CPU", m.get("cpu", "?")],
                    ["RAM", m.get("ram", "?")], ["kernel", m.get("kernel", "?")],
                    ["PostgreSQL", m.get("pg", "?")], ["spindle commit", m.get("spindle_commit", "?")],
                    ["PgQ", m.get("pgq", "?")], ["pg_partman", m.get("partman", "?")],
                    ["load average at start / end", "%s / %s" % (m.get("loadavg", "?"),
                                                               m.get("loadavg_end", "?"))],
                    ["time per workload (s)", ", ".join("%s %s" % kv for kv in
                                                        (R.get("timings") or {}).items())],
                    ["1-minute load average at the end of each workload",
                     ", ".join("%s %s" % kv for kv in (R.get("load") or {}).items()) or "?"]]),
                "\nThe machine is shared with other work (the load average above says how busy "
                "it was); figures are noisy, compare systems within one run.\n\n"
                "One throwaway cluster (initdb in a temp dir, unix socket only), the same settings "
                "for every system; everything else at PostgreSQL's defaults (autovacuum on):\n\n"
                "```\n" + "\n".join(" = ".join(map(str, s)) if isinstance(s, (list, tuple)) else str(s)
                                     for s in R.get("settings") or []) + "\n```\n",
                "\nPayload: %s. Heap-like queues: `%s`.\n"
                % (payload(), "(id bigserial PRIMARY KEY, enqueued_at timestamptz, prio int, payload jsonb)")]

    def payload():
        pb = R.get("payload_bytes") or {}
        if pb.get("text") is not None and pb.get("jsonb") is not None:
            return ("a JSON document of %s characters as text, stored as %s bytes of jsonb "
                    "(pg_column_size; issue 9 asks for ~120-byte jsonb)" % (fmt(pb["text"]), fmt(pb["jsonb"])))
        return "a ~125-character JSON document (jsonb)"

    def sec_howto():
        return ["## How to run\n",
                "```sh\n"
                "sudo ./scripts/build.sh        # build and install spindle (or make install)\n"
                "sudo make bench                # full mode; rewrites docs/benchmarks.md\n"
                "sudo make bench-short          # short mode (CI: test/t/045_bench_short.pl), "
                "< 3 minutes\n"
                "BENCH_OUT=/tmp/b make bench    # write the report elsewhere\n"
                "make bench-stragglers          # by hand, each printing its figures: the\n"
                "make bench-wal-checkpoint      # sections after section 8, kept in\n"
                "make bench-queues              # bench/<name>.md; put into this report by\n"
                "make bench-sparse              # python3 bench/report.py --splice docs/benchmarks.md\n"
                "make bench-backlog\n"
                "```\n\n"
                "`bench/run.sh` installs postgresql-15-pgq3, postgresql-15-partman and gnuplot-nox "
                "when they are missing (as root), runs `bench/harness.py` as user postgres (when "
                "invoked as root) on a cluster in a temp dir, and copies the report and its plots to "
                "BENCH_OUT (default docs/). Every parameter can be changed with an environment "
                "variable (BENCH_ROUNDS, BENCH_SECS, BENCH_BACKLOG, BENCH_STEADY_SECS, BENCH_HELD_SECS, "
                "BENCH_HELD_START, BENCH_HELD_HOLD, BENCH_STEADY_RATE, BENCH_ONLY=enqueue,dequeue,...: "
                "see the top of bench/harness.py). The raw figures are in results.json next to the "
                "report (bench/run.sh copies it there even when the report fails). The run that "
                "wrote this report took %s.\n\nThe statements each system runs (pgbench scripts):\n\n"
                % ("%d minutes" % round(sum(nums((R.get("timings") or {}).values())) / 60.0)),
                "```sql\n" + SCRIPTS + "```\n"]

    # Each section is rendered on its own: one that raises (a missing key, a
    # None where a figure was expected) says so in its place and is listed
    # at the top, and the rest of the report is still written.
    def render(title, fn):
        try:
            return "".join(fn())
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f for f in reversed(tb) if f.filename.endswith("report.py")), tb[-1])
            err = "%s: %s (bench/report.py line %d)" % (type(e).__name__, e, where.lineno)
            failed.append((title, err))
            return "## %s\n\nThis section failed to render: `%s`\n" % (title, err.replace("`", "'"))

    body = [render(t, fn) for t, fn in [
        ("1. Enqueue", sec_enqueue), ("2. Dequeue from a backlog", sec_dequeue),
        ("3. Steady state", sec_steady), ("4. Held snapshot", sec_held_snapshot),
        ("5. Head cost", sec_head_cost), ("6. WAL per event", sec_wal),
        ("7. Cache on and off", sec_cache), ("8. Memory", sec_memory)]]
    machine_sec = render("Machine and settings", sec_machine)
    howto = render("How to run", sec_howto)

    def sec_summary():
        rows = T.ordered([t for t, _ in failed])
        met, missed, unmeasured, info = Targets.count(rows)
        return ["## Summary: targets\n",
                "Targets from issue 9. The ceiling rule (issue 9): a target \"k times a base\" "
                "has the bar k x base, unless k x base is above the commit ceiling (a one-row "
                "INSERT per transaction, the same clients, the same run) times the events per "
                "transaction n; there the bar is 90%% of ceiling x n. Rows under the rule show both "
                "figures. A target without figures is \"not measured\" and counts as not met; "
                "informational rows are not targets and are not counted.%s\n"
                % (" Short mode: met/not met here means nothing." if R.get("short") else ""),
                table(["target", "measured", "bar", "met?"], [r[1:] for r in rows]),
                "\n%d met, %d not met%s%s.\n" % (
                    met, missed, " (%d of them not measured)" % unmeasured if unmeasured else "",
                    "; %d informational row%s (not a target, not counted)" % (info, "s" if info > 1 else "")
                    if info else "")]
    summary = render("Summary: targets", sec_summary)

    # ---- head of the document
    def sec_head():
        if "overrides" in R:
            given = R["overrides"] or {}
        else:
            import harness
            given = harness.overrides()
        mode = ("**SHORT MODE** (BENCH_SHORT=1: a few seconds per workload, small backlog, steady and "
                "held runs of seconds, the systems side by side, one run each): this proves the harness "
                "and the report work; its figures say nothing about speed."
                if R.get("short") else
                "Full mode (`make bench`)." if not given else
                "The full mode's workloads (`make bench`), with changed parameters (below).")
        custom = sorted(given)
        head = ["# spindle benchmarks\n",
                "Generated by `bench/run.sh` (`%s`) on %s; do not edit by hand.\n" % (
                    R.get("command", "make bench"), m.get("date", "?")),
                "\n%s\n" % mode]
        if custom:
            head.append("\n**A reduced run, not the full mode as it stands**: it changed the harness's "
                        "defaults: %s.\n" % ", ".join("`%s=%s`" % (k, given[k]) for k in custom))
        if R.get("failures"):
            head.append("\n**Workloads that failed:** %s\n" % "; ".join(
                "%s: %s" % (k, str(v).splitlines()[0][:300] if v else "?")
                for k, v in R["failures"].items()))
        return head
    head = render("spindle benchmarks", sec_head)
    if failed:
        head += ("\n**Parts of this report that failed to render** (the rest is complete): %s\n"
                 % "; ".join("%s: `%s`" % (t, e.replace("`", "'")) for t, e in failed))

    # why the targets missed are missed: measured by hand (perf, pg_waldump),
    # kept in bench/analysis.md and quoted as written
    analysis = ""
    apath = os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis.md")
    if os.path.exists(apath) and not R.get("short"):
        with open(apath) as fh:
            analysis = fh.read().rstrip() + "\n"

    # benchmarks with scripts of their own, run by hand (BY_HAND): their
    # sections are quoted as written, before "How to run"
    by_hand = "" if R.get("short") else by_hand_sections()

    doc = head + "\n" + summary + "\n" + (analysis + "\n" if analysis else "") + machine_sec + \
        "\n" + "\n".join(body) + "\n" + by_hand + howto
    with open(os.path.join(outdir, "benchmarks.md"), "w") as f:
        f.write(doc)
    return doc


# The benchmarks run by hand, each with a make target and a script of its
# own that prints its figures; their sections of docs/benchmarks.md are kept
# in these files (written from a run's output) and copied in, in this order.
BY_HAND = ["stragglers.md",      # make bench-stragglers (bench/stragglers.sh)
           "wal_checkpoint.md",  # make bench-wal-checkpoint
           "queues.md",          # make bench-queues
           "sparse.md",          # make bench-sparse
           "backlog.md"]         # make bench-backlog


def by_hand_sections():
    """The by-hand sections (BY_HAND that exist), as one text."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = ""
    for name in BY_HAND:
        path = os.path.join(here, name)
        if os.path.exists(path):
            with open(path) as fh:
                out += fh.read().rstrip() + "\n\n"
    return out


def splice(doc_path):
    """Replace the by-hand sections of an existing report (from the first
    of them to "## How to run") with the current fragments, so that a
    by-hand run reaches docs/benchmarks.md without a full `make bench`."""
    with open(doc_path) as fh:
        doc = fh.read()
    first = None
    here = os.path.dirname(os.path.abspath(__file__))
    for name in BY_HAND:
        path = os.path.join(here, name)
        if os.path.exists(path):
            with open(path) as fh:
                title = fh.readline().rstrip("\n")
            at = doc.find("\n" + title + "\n")
            if at >= 0 and (first is None or at < first):
                first = at
    end = doc.find("\n## How to run\n")
    if end < 0:
        raise SystemExit("%s has no \"## How to run\" section" % doc_path)
    if first is None or first > end:
        first = end
    doc = doc[:first + 1] + by_hand_sections() + doc[end + 1:]
    with open(doc_path, "w") as fh:
        fh.write(doc)


SCRIPTS = """-- enqueue (one per transaction; batches: enqueue_batch / INSERT ... SELECT
-- generate_series(1, 100) / SELECT count(pgq.insert_event(...)) FROM generate_series(1, 100))
SELECT spindle.enqueue('q', :payload);
INSERT INTO st|hq|hb|pq (prio, payload) VALUES (0, :payload);
SELECT pgq.insert_event('q', 'ev', :payload);
INSERT INTO ceiling VALUES (1);                       -- the commit ceiling

-- dequeue n
SELECT msg_id, enqueued_at, payload FROM spindle.dequeue('q', n);
SELECT coalesce(array_agg(msg_id), '{}') AS ids, coalesce(json_agg(payload), '[]')
  FROM spindle.read('q', n, '60 s') \\gset
SELECT count(*) FROM spindle.ack('q', CAST(:ids AS bigint[]));
DELETE FROM hq WHERE id = (SELECT id FROM hq ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING id, enqueued_at, prio, payload;           -- n = 1 (st, pq alike)
DELETE FROM hq WHERE id = ANY (ARRAY(SELECT id FROM hq ORDER BY id LIMIT n
  FOR UPDATE SKIP LOCKED)) RETURNING id, enqueued_at, prio, payload;   -- n > 1
BEGIN;                                                -- PgQ, one batch
SELECT coalesce(pgq.next_batch('q', 'c'), 0) AS bid \\gset
\\if :bid > 0
SELECT ev_id, ev_time, ev_data FROM pgq.get_batch_events(:bid);
SELECT pgq.finish_batch(:bid);
\\endif
COMMIT;
"""


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--splice":
        splice(sys.argv[2])
    else:
        raise SystemExit("usage: report.py --splice docs/benchmarks.md "
                         "(the report itself is written by harness.py)")
