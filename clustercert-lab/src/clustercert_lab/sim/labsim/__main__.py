"""Entry point inside a node: ``python3 /var/lib/clustercert-lab/labsim TOOL [ARGS...]``.

Stdlib only (runs with the node's Debian 12 python3). Dispatches to the simulated tool named by
the first argument (nvidia-smi, ibv_devinfo, ib_write_bw, all_reduce_perf, agent, ...).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from labsim.main import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
