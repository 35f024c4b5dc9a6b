import sys

from scripts.deployment.cli import main

sys.exit(main())
