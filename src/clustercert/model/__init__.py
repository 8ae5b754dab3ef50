"""Model: what the user gives clustercert, loaded and validated, and the evidence types.

The inventory (clustercert_* variables, connection settings, each host's resolved profile), the
node-class profiles, the rules for names that reach a shell, strict YAML loading, the starter
inventory ``init`` writes, and the evidence a collection returns (model.evidence). Imports nothing
of clustercert but errors, paths and the other model modules (docs/architecture.md).
"""
