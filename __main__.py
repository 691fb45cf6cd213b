"""``python -m gpuledger``: the same as the ``gpuledger`` console script."""

import sys

from gpuledger.cli.main import main

sys.exit(main())
