"""Commands: one thin module per verb, ``run(args) -> exit status``.

Each one reads its parsed flags (clustercert.cli builds the parser from clustercert.cmdoptions),
calls the layers (model, collect, checks and probes, record, report) and prints; the logic lives
in those layers. None imports the lab (clustercert_lab): ``-i lab`` is resolved in commands.common by the
lab's path convention (clustercert.paths), and ``lab`` runs the lab's own program (docs/architecture.md).
"""
