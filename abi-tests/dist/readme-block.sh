#!/bin/sh
# Prints the code block of a Markdown file that follows the line
# `<!-- checked: NAME -->`, without its fences: how CI runs the README's
# commands exactly as written (check.sh; .ci/run for those of the workspace).
#   readme-block.sh README.md NAME
set -eu
[ $# -eq 2 ] || { echo "usage: $0 FILE.md NAME" >&2; exit 2; }
awk -v marker="<!-- checked: $2 -->" '
    state == 0 && $0 == marker { state = 1; next }
    state == 1 && /^```/ { state = 2; next }
    state == 1 { exit }
    state == 2 && /^```/ { state = 3; exit }
    state == 2 { print }
    END {
        if (state != 3) {
            print "readme-block.sh: no block after `" marker "` in " FILENAME > "/dev/stderr"
            exit 1
        }
    }
' "$1"
