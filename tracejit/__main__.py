"""``python -m tracejit cache info|clear|prune [--max-mb N]``: manage the disk kernel cache."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tracejit")
    sub = parser.add_subparsers(dest="command", required=True)
    cache = sub.add_parser("cache", help="the disk kernel cache")
    cache.add_argument("action", choices=["info", "clear", "prune"])
    cache.add_argument("--max-mb", type=float, default=None,
                       help="prune: size cap in MB (default $TRACEJIT_CACHE_MAX_MB; none: only "
                            "entries of other versions are removed)")
    args = parser.parse_args(argv)
    from .compiler import cachetool
    if args.action == "info":
        i = cachetool.info()
        if i["root"] is None:
            print("disk cache: off (TRACEJIT_CACHE=0) or unusable")
            return 0
        print(f"root: {i['root']}")
        print(f"entries: {i['entries']}")
        print(f"size: {i['bytes'] / 1e6:.1f} MB" + (f" (cap {i['max_mb']:g} MB)" if i["max_mb"] else ""))
        print(f"entries of other versions (never loaded again): {i['stale_entries']}")
        for v, n in sorted(i["versions"].items()):
            print(f"  {n:6d}  {v}")
    elif args.action == "clear":
        print(f"removed {cachetool.clear()} entries")
    else:
        r = cachetool.prune(args.max_mb)
        print(f"removed {r['removed']} entries, freed {r['freed_bytes'] / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
