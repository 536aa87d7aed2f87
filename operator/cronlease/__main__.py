"""python -m cronlease"""

from cronlease.main import main

main()
