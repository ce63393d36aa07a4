#!/bin/sh
# Doxygen INPUT_FILTER (docs/Doxyfile.in): doxygen_staged.sh ROOT STAGED FILE prints the filtered
# copy of FILE (a header under ROOT) that `doxygen_filter.py --stage ROOT STAGED` wrote, the same
# text doxygen_filter.py FILE prints, without starting Python once per header.
copy="$2${3#"$1"}"
if [ ! -f "$copy" ]; then
  echo "doxygen_staged.sh: no filtered copy of $3 under $2 (run doxygen_filter.py --stage first)" >&2
  exit 1
fi
exec cat "$copy"
