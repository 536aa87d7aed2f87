"""`python -m cronlease.kubectl`, and the one executable of the krew archive: run under the name
`kubectl_complete-cronlease` (a link to it), it completes instead, since krew links one file per
plugin onto the PATH and kubectl looks for the completer by that name."""

from __future__ import annotations

import os
import sys


def main() -> None:
    if os.path.basename(sys.argv[0]).startswith("kubectl_complete-"):
        from cronlease.kubectl import completion

        completion.main()
    else:
        from cronlease.kubectl import cli

        cli.main()


if __name__ == "__main__":
    main()
