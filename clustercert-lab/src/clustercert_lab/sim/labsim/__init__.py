"""Node-side simulator of the clustercert lab (stdlib only; copied into every node's sim dir)."""
