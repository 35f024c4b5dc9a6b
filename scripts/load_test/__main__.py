import sys

from scripts.load_test.cli import main

sys.exit(main())
