import sys

from roll_core.cli import main

sys.exit(main())
