import sys

from zeus_airflow.cli import main

sys.exit(main())
