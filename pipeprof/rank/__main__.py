import sys

from pipeprof.rank.worker import main

sys.exit(main())
