"""``sglang-pd-lean doctor``: the installed SGLang, each gate's state, whether the
plugin can do its job there, and whether ``report`` can run there (every seam it
needs, from ``seams.SEAMS``). Exit code 0 when both hold, 1 otherwise.

    report = doctor_report()
    report["healthy"], report["report_can_run"], report["missing_seams"]
"""

from __future__ import annotations

import importlib.util
import json

from sglang_pd_lean.census.environment import quiet_sglang
from sglang_pd_lean.cli.grid import grid


def doctor_report() -> dict:
    """The installed SGLang, every gate's state, and whether the plugin is healthy:
    ``compat.decide()``, the answer ``plugin.register()`` acts on."""
    from sglang_pd_lean import compat, seams, survey

    decision = compat.decide()
    supported = compat.is_supported(decision.version)
    surveyed = survey.survey(decision.version) if decision.version else []
    missing = [
        survey.Missing(x.seam, x.error) for x in surveyed if x.expected and not x.found
    ]
    every = [
        {
            "seam": x.seam.label,
            "part": x.seam.part.value,
            "why": x.seam.why,
            "found": x.found,
            "expected": x.expected,
        }
        for x in surveyed
    ]
    report_missing = [m for m in missing if m.seam.part == seams.Part.REPORT]
    gates = [
        {
            "name": gate.name,
            "state": (
                gate.state.value if supported else "not applied (unsupported SGLang)"
            ),
            "detail": gate.detail or gate.summary,
        }
        for gate in decision.plans
    ]
    speculative = speculative_audit() if decision.version else None
    return {
        "sglang_version": decision.version,
        "supported": supported,
        "supported_releases": [compat.SUPPORTED[0], compat.SUPPORTED[-1]],
        "kill_switch": decision.disabled,
        "gates": gates,
        "missing_hook_targets": list(decision.missing),
        "unhandled_gates": decision.gates_in(compat.GateState.UNHANDLED),
        "unsafe_gates": decision.gates_in(compat.GateState.UNSAFE),
        "gates_off": {gate.name: gate.detail for gate in decision.off},
        "healthy": decision.healthy,
        "missing_seams": [
            {
                "seam": m.seam.label,
                "part": m.seam.part.value,
                "why": m.seam.why,
                "error": m.error,
            }
            for m in missing
        ],
        "report_can_run": supported and not report_missing,
        "seams": every,
        "speculative": speculative,
        "entries_without_plugins": entries_without_plugins(),
    }


def entries_without_plugins() -> list[dict]:
    """SGLang's entry points that build a scheduler or a model runner but never
    call ``load_plugins()`` (``seams.MODEL_ENTRIES``, read from the module's
    compiled code, not run): the plugin's gates never apply there."""
    from sglang_pd_lean import seams
    from sglang_pd_lean.upstream import module_names

    found = []
    for candidates, what in seams.MODEL_ENTRIES:
        for module in candidates:
            names = module_names(module)
            if names is None:
                continue
            if "load_plugins" not in names:
                found.append({"entry": what, "module": module})
            break
    return found


def speculative_audit() -> dict:
    """``audit.matrix()`` as JSON: per speculative algorithm of the installed
    SGLang, what a PD prefill server builds only for a verify step; where the audit
    cannot read SGLang's dispatch, the error instead of rows."""
    from sglang_pd_lean import audit

    try:
        return {**audit.as_json(audit.matrix()), "error": None}
    except Exception as exc:  # doctor still reports the gates
        return {
            **audit.as_json([]),
            "error": f"{type(exc).__name__}: {exc}",
        }


def speculative_lines(speculative: dict) -> list[str]:
    """doctor's text for the audit: one row per algorithm, one column per piece,
    then a line for each piece still built or not audited, saying why."""
    if speculative is None:
        return []
    head = (
        "speculative algorithms on a PD prefill server "
        "(pieces only a verify step uses):"
    )
    if speculative["error"]:
        return [head, f"  audit failed: {speculative['error']}"]
    pieces = speculative["pieces"]
    rows = speculative["rows"]
    labels = [row_label(row) for row in rows]
    workers = [(row["worker"] or "?").rpartition(".")[2] for row in rows]
    cells = [
        [CELL_WORDS[row["cells"][p["key"]]["state"]] for p in pieces] for row in rows
    ]
    table = [["algorithm", "worker", *(p["title"] for p in pieces)]]
    table += [
        [label, worker, *said]
        for label, worker, said in zip(labels, workers, cells, strict=True)
    ]
    lines = [head, *("  " + line for line in grid(table, align="<"))]
    lines.append(
        "  native: SGLang skips it; plugin: the plugin removes it; built: still "
        "built (below); -: not present"
    )
    for label, row in zip(labels, rows, strict=True):
        for p in pieces:
            cell = row["cells"][p["key"]]
            if cell["state"] in ("still built", "not audited"):
                lines.append(
                    f"  {label}: {p['title']} {cell['state']}: {cell['detail']}"
                )
    return lines


def row_label(row: dict) -> str:
    """An algorithm row's name: its algorithms, and the flags that choose it."""
    text = ", ".join(row["algorithms"])
    if row["flags"]:
        text += " + " + " ".join("--" + f.replace("_", "-") for f in row["flags"])
    return text


# An audit state in a table cell.
CELL_WORDS = {
    "native upstream": "native",
    "removed by the plugin": "plugin",
    "still built": "built",
    "not present": "-",
    "not audited": "not audited",
}


def cmd_doctor(args) -> int:
    if importlib.util.find_spec("sglang") is not None:
        quiet_sglang()
    report = doctor_report()
    ok = report["healthy"] and report["report_can_run"]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if ok else 1
    version = report["sglang_version"]
    low, high = report["supported_releases"]
    if version is None:
        print(f"SGLang: not installed (supported: {low} to {high})")
        return 1
    if args.seams:
        for seam in report["seams"]:
            state = (
                "found"
                if seam["found"]
                else ("MISSING" if seam["expected"] else "absent (not on this release)")
            )
            print(f"{state:30}{seam['part']:9}{seam['found'] or seam['seam']}")
    print(f"SGLang {version}")
    print(f"supported: {'yes' if report['supported'] else 'no'} ({low} to {high})")
    width = max(len(gate["state"]) for gate in report["gates"]) + 2
    names = name_width(report["gates"])
    print(f"{'gate':{names}}{'state':{width}}detail")
    for gate in report["gates"]:
        print(f"{gate['name']:{names}}{gate['state']:{width}}{gate['detail']}")
    for line in speculative_lines(report["speculative"]):
        print(line)
    for entry in report["entries_without_plugins"]:
        print(
            f"never loads plugins: {entry['entry']} ({entry['module']}): the gates "
            f"do not apply in the processes it starts"
        )
    for line in report["missing_hook_targets"]:
        print(f"missing hook target: {line}")
    for name in report["unhandled_gates"]:
        print(f"unhandled: {name} (this SGLang needs a gate the plugin does not have)")
    for name in report["unsafe_gates"]:
        print(f"not registered: {name} (unsafe on this SGLang, see its detail)")
    for m in report["missing_seams"]:
        print(f"missing seam ({m['part']}: {m['why']}): {m['seam']}: {m['error']}")
    if report["report_can_run"]:
        print("report: can run on this SGLang (every seam it needs resolves)")
    else:
        print("report: cannot run on this SGLang (see the missing seams above)")
    return 0 if ok else 1


def name_width(gates: list[dict]) -> int:
    """The gate column of doctor's text: 13, or the longest name and 2 spaces."""
    return max(13, *(len(gate["name"]) + 2 for gate in gates))


# A gate's state in docs/releases.md, short.
RELEASE_CELLS = {
    "native upstream": "native",
    "applied by the plugin": "plugin",
    "not applicable": "n/a",
    "not registered: unsafe here": "unsafe",
    "not registered: hook target missing": "missing",
    "needed, not handled": "unhandled",
    "disabled by kill switch": "off",
}


def release_row(report: dict) -> str:
    """One release's row of docs/releases.md, from its ``doctor --json``."""
    cells = [report["sglang_version"]]
    cells += [RELEASE_CELLS.get(g["state"], g["state"]) for g in report["gates"]]
    cells.append("yes" if report["report_can_run"] else "no")
    missing = [m["seam"].rsplit(".", 1)[-1] for m in report["missing_seams"]]
    cells.append(", ".join(missing) or "none")
    return "| " + " | ".join(cells) + " |"


def speculative_rows(report: dict) -> list[str]:
    """One release's rows of docs/releases.md's speculative table, from its
    ``doctor --json``: a row per algorithm, a cell per piece (with the flags where
    it is still built)."""
    speculative = report["speculative"]
    if speculative["error"]:
        version, error = report["sglang_version"], speculative["error"]
        return [f"| {version} | audit failed: {error} |"]
    out = []
    for row in speculative["rows"]:
        cells = [
            report["sglang_version"],
            row_label(row),
            (row["worker"] or "?").rpartition(".")[2],
        ]
        for piece in speculative["pieces"]:
            cell = row["cells"][piece["key"]]
            word = CELL_WORDS.get(cell["state"], cell["state"])
            if cell["state"] == "still built":
                word += " " + cell["detail"].split(":", 1)[0]
            cells.append(word)
        out.append("| " + " | ".join(cells) + " |")
    return out


def speculative_table(reports: list[dict]) -> str:
    """docs/releases.md's speculative table: every release's rows."""
    pieces = reports[0]["speculative"]["pieces"]
    head = ["SGLang", "algorithm", "worker", *(p["title"] for p in pieces)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for report in reports:
        lines += speculative_rows(report)
    return "\n".join(lines)


def release_table(reports: list[dict]) -> str:
    """docs/releases.md's table: one row per release's ``doctor --json``."""
    gates = [g["name"] for g in reports[0]["gates"]]
    head = ["SGLang", *gates, "report runs", "missing seams"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + [release_row(r) for r in reports])
