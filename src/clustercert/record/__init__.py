"""Record: what a run leaves behind.

record.store: the SQLite store of runs, verdicts, findings and links; record.certificate: the
signed certificate (canonical form, signing key, sign, verify); record.results: a run's node and
link records and the certificate's body, from the evaluated evidence; record.runlock: one
certify/probe/drift run per inventory at a time. Imports evaluate (checks, probes), model and the
base modules, never report or commands (docs/architecture.md).
"""
