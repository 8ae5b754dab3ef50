"""`clustercert node-check`: this node's own checks, run on it -- validate's per-node half, without a
controller.

Glue only: the profile is model.nodefile's (a node file, or a built-in), the selection and the run
checks.run's (node_selection, validate_here), --drain collect.slurm's (apply_here), the document and the lines
report's;
--build-zipapp is remote.nodeapp's, with the built-in profiles resolved by model.profile. This module is in
the zipapp itself: what only the controller has (pydantic) is imported where --build-zipapp needs it.
"""

from __future__ import annotations

import json
import socket
import time

from clustercert.checks import COMPONENT_MODULES, HostContext
from clustercert.checks import run as check_run
from clustercert.collect import slurm
from clustercert.errors import InputError
from clustercert.model import names, nodefile
from clustercert.report import documents, text


def run(args) -> int:
    if args.build_zipapp:
        return build(args)
    if not args.profile:
        raise InputError("--profile", None, "required: the node file the node_check role writes, or a "
                                            "built-in profile name (or --build-zipapp FILE)")
    comp_names, ids = check_run.node_selection(args.checks, args.skip)  # bad input first: nothing runs
    tool_path = args.tool_path or ""
    for d in filter(None, tool_path.split(":")):
        if why := names.CHECKS["remote_path"](d):
            raise InputError("--tool-path", d, why)
    here = socket.gethostname().split(".")[0]  # hostname -s
    if args.slurm_node is not None and not args.drain:
        raise InputError("--slurm-node", args.slurm_node, "only with --drain")
    slurm_node = args.slurm_node or here
    if args.drain and (why := slurm.unusable_name(slurm_node)):
        raise InputError("--slurm-node", slurm_node, why)
    node = nodefile.resolve(args.profile)
    ctx = HostContext(node.node or here, node.profile, node.timeout_s)
    started = time.time()
    result = check_run.validate_here(ctx, comp_names, ids, tool_path)
    actions = [slurm.apply_here(ctx.name, result.to_json(), slurm_node, tool_path)] if args.drain else []
    doc = documents.node_check_document(result, started, time.time(), node.source, comp_names, ids, actions)
    if args.format == "json":
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join(text.node_check_lines(result, node.source, actions)))
    return 0 if result.verdict == "pass" and all(a["ok"] for a in actions) else 1


def build(args) -> int:
    """--build-zipapp FILE: on the controller (pydantic validates the built-in profiles it carries)."""
    others = [
        flag
        for flag, value in (
            ("--profile", args.profile),
            ("--checks", args.checks),
            ("--skip", args.skip),
            ("--drain", args.drain),
            ("--slurm-node", args.slurm_node),
            ("--tool-path", args.tool_path),
        )
        if value
    ]
    if others:
        raise InputError(
            "--build-zipapp", others[0], "builds the program only: run the zipapp with the node's options"
        )
    try:
        from clustercert.model.profile import builtin_profiles, load_profile
        from clustercert.remote import nodeapp
    except ImportError:
        raise InputError("--build-zipapp", None, "builds on the controller (clustercert installed with pip), "
                                                 "not from a node-check zipapp") from None
    profiles = {name: load_profile(name).model_dump(mode="json") for name in builtin_profiles()}
    out, changed = nodeapp.build(args.build_zipapp, profiles, COMPONENT_MODULES)
    print(
        f"{out}: {'written' if changed else 'unchanged'} ({out.stat().st_size} bytes; python3 {out} --help)"
    )
    return 0
