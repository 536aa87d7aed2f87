"""python -m cronlease"""

from cronlease.app.main import main

main()
