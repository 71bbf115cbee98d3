#!/usr/bin/env python3
"""GB/s by transfer size, both directions, from one run's bench.csv: hostcopy
with its default options beside the CUDA driver's own pageable path and a
copy into (or from) pinned memory, the link. Writes an SVG; standard library
only.

The Rust benchmark (driver/benches/staged_copy) measures sizes in groups:
`small` (4 KiB to 4 MiB, a scope with default options, which takes the
driver's path through the stager's pinned buffer below 2 MiB), `sizes`
(64 MiB up, a blocking call) and `one transfer` (64 MiB, 256 MiB and 1 GiB,
each beside a pinned copy of the same size). Every point is a row of the
run's bench.csv; a line joins the points of one group only, and pinned
memory is drawn where the run copied it.

usage: python3 xtask/gpu-runs/chart.py [RUN-FOLDER] [--out FILE] [--check]
  RUN-FOLDER  under xtask/gpu-runs/ (default: 2026-12-02-h200-run43, the
              last run of every size group)
  --out FILE  default: docs/chart-gbps.svg
  --check     write nothing; fail if FILE is not what the run's data makes
"""

import argparse
import csv
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_RUN = "2026-12-02-h200-run43"
DEFAULT_OUT = ROOT / "docs" / "chart-gbps.svg"

# (group in bench.csv, path in it): what each series is made of, per direction.
SERIES = {
    "hostcopy": {
        "D2H": [("small, D2H (crossover)", "scope, default options"), ("sizes, D2H", "staged, defaults")],
        "H2D": [("small, H2D (scope)", "scope, default options"), ("sizes, H2D", "staged, defaults")],
    },
    "driver": {
        "D2H": [("small, D2H (crossover)", "driver pageable"), ("sizes, D2H", "driver pageable")],
        "H2D": [("small, H2D (scope)", "driver pageable"), ("sizes, H2D", "driver pageable")],
    },
    "pinned": {
        "D2H": [("one transfer, * D2H (x pinned: pinned D2H of the same size)", "pinned (link)")],
        "H2D": [("one transfer, * H2D (x pinned: pinned H2D of the same size)", "pinned (link)")],
    },
}
STYLE = {
    "hostcopy": ("#1f6fb4", "hostcopy, default options"),
    "driver": ("#d9711c", "the driver's pageable path"),
    "pinned": ("#555555", "pinned memory (the link)"),
}
DIRECTIONS = [("D2H", "GPU to host"), ("H2D", "host to GPU")]

# Layout, in SVG units.
WIDTH, HEIGHT = 900, 400
PANEL_W, PANEL_H = 380, 250
PANEL_X = [60, 500]
PANEL_Y = 70
Y_MAX = 60.0
X_MIN, X_MAX = 12, 34  # log2 of bytes: 4 KiB to 16 GiB


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:g} {unit}"
    return f"{n} B"


def matches(pattern, group):
    if "*" not in pattern:
        return pattern == group
    head, tail = pattern.split("*")
    return group.startswith(head) and group.endswith(tail)


def read_series(run):
    path = HERE / run / "bench.csv"
    rows = list(csv.DictReader(path.open(newline="")))
    series = {}
    for name, directions in SERIES.items():
        for direction, sources in directions.items():
            segments = []
            for group, wanted in sources:
                points = sorted(
                    (int(r["bytes"]), float(r["gbps"]))
                    for r in rows
                    if matches(group, r["group"]) and r["path"] == wanted and r["gbps"] not in ("", "NaN")
                )
                if points:
                    segments.append(points)
            if not segments:
                sys.exit(f"{path}: no rows for {name} {direction} ({sources})")
            series[(name, direction)] = segments
    return series


def x_of(panel, nbytes):
    return PANEL_X[panel] + (math.log2(nbytes) - X_MIN) / (X_MAX - X_MIN) * PANEL_W


def y_of(gbps):
    return PANEL_Y + PANEL_H - gbps / Y_MAX * PANEL_H


def card_of(run):
    """The GPU's name as the run's machine.txt gives it (`NVIDIA H200`), else as its folder does."""
    machine = HERE / run / "machine.txt"
    lines = machine.read_text().splitlines() if machine.is_file() else []
    named = [line.split(",")[0].strip() for line in lines if line.startswith("NVIDIA ")]
    return named[0] if named else "NVIDIA " + run[11:].split("-run")[0].split("x")[0].upper()


def svg(run, series):
    date, card, number = run[:10], card_of(run), run.split("-run")[1]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f"<title>GB/s by transfer size: hostcopy, the driver's pageable path and pinned memory; "
        f"{card}, run {number} ({date})</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2:.0f}" y="24" text-anchor="middle" font-size="15">'
        f"One transfer between GPU memory and pageable host memory, GB/s by size</text>",
        f'<text x="{WIDTH / 2:.0f}" y="44" text-anchor="middle" fill="#444">'
        f"{card}; xtask/gpu-runs/{run}/bench.csv (run {number}, {date})</text>",
    ]
    for panel, (direction, title) in enumerate(DIRECTIONS):
        x0, x1 = PANEL_X[panel], PANEL_X[panel] + PANEL_W
        y0, y1 = PANEL_Y, PANEL_Y + PANEL_H
        out.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{y0 - 8}" text-anchor="middle" font-size="13">{title}</text>')
        for gbps in range(0, int(Y_MAX) + 1, 10):
            y = y_of(gbps)
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#444">{gbps}</text>')
        for exponent in range(X_MIN, X_MAX + 1, 4):
            x = x_of(panel, 1 << exponent)
            out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="#eeeeee"/>')
            out.append(f'<text x="{x:.1f}" y="{y1 + 16}" text-anchor="middle" fill="#444">{size_label(1 << exponent)}</text>')
        # Below 2 MiB hostcopy takes the driver's path (through its own pinned buffer).
        x = x_of(panel, 2 << 20)
        out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="#999" stroke-dasharray="3,3"/>')
        out.append(f'<text x="{x - 4:.1f}" y="{y0 + 14}" text-anchor="end" fill="#777" font-size="10">driver\'s path below 2 MiB</text>')
        out.append(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>')
        if panel == 0:
            out.append(
                f'<text x="{x0 - 40}" y="{(y0 + y1) / 2:.0f}" text-anchor="middle" fill="#444" '
                f'transform="rotate(-90 {x0 - 40} {(y0 + y1) / 2:.0f})">GB/s (10^9 bytes per second)</text>'
            )
        for name in ("pinned", "driver", "hostcopy"):
            colour, label = STYLE[name]
            for segment in series[(name, direction)]:
                points = [(x_of(panel, n), y_of(g)) for n, g in segment]
                if name != "pinned" and len(points) > 1:
                    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
                    out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
                for (n, g), (x, y) in zip(segment, points):
                    tip = f"<title>{label}, {size_label(n)} {direction}: {g:.1f} GB/s</title>"
                    if name == "pinned":
                        out.append(
                            f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{colour}">{tip}</rect>'
                        )
                    else:
                        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">{tip}</circle>')
    legend_y = HEIGHT - 28
    for i, name in enumerate(("hostcopy", "driver", "pinned")):
        colour, label = STYLE[name]
        x = 110 + i * 250
        if name == "pinned":
            out.append(f'<rect x="{x + 6}" y="{legend_y - 8}" width="8" height="8" fill="{colour}"/>')
        else:
            out.append(f'<line x1="{x}" y1="{legend_y - 4}" x2="{x + 20}" y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"/>')
            out.append(f'<circle cx="{x + 10}" cy="{legend_y - 4}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{x + 28}" y="{legend_y}">{label}</text>')
    out.append(
        f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle" fill="#666" font-size="10">'
        "4 KiB to 4 MiB: a scope (the small group); 64 MiB up: a blocking call (the sizes group); "
        "pinned: the one-transfer group; no size between 4 and 64 MiB was measured</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", default=DEFAULT_RUN)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = svg(args.run, read_series(args.run))
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            sys.exit(f"{args.out} is not what {Path(__file__).name} makes of {args.run}: run it again")
        return
    args.out.write_text(text)
    print(args.out)


if __name__ == "__main__":
    main()
