"""Report: what the user reads. Pure presentation, dict in, text out (report.files writes the files).

html, junit, markdown: the certificate's reports (report.html, junit.xml, summary.md; common: what
they share); terminal: the tables and lines the verbs print; documents: the ``--format json``
documents and their schemas; prom: node_exporter textfiles (``--prom``); progress: live playbook
progress; catalogue: every check and probe id (``clustercert checks``, docs/checks.md). Imports
record, evaluate (checks, probes), model and the base modules, never commands (docs/architecture.md).
"""
