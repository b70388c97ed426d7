#!/bin/sh
# Prints shoal's version for builds and packages, from git describe, in a form
# Debian accepts (digits first; no '-', which would start a Debian revision):
#   tag v1.2.3                   -> 1.2.3
#   3 commits after v1.2.3       -> 1.2.3+git20261206.3.abc1234
#   no tag                       -> 0.0~git20261206.abc1234  (~ sorts before 0.0)
#   uncommitted changes          -> ...+dirty
# The date is the commit's (UTC), so a commit always gets the same version.
# Outside a git checkout it prints 0.0~unknown.
set -eu
d=$(git describe --tags --always --dirty 2>/dev/null) || { echo 0.0~unknown; exit 0; }
day=$(TZ=UTC git log -1 --date=format-local:%Y%m%d --format=%cd)
dirty=
case $d in *-dirty) dirty=+dirty; d=${d%-dirty} ;; esac
case $d in
v[0-9]*-[0-9]*-g[0-9a-f]*)
  rest=${d#v}; hash=${rest##*-g}; rest=${rest%-g*}; n=${rest##*-}; tag=${rest%-*}
  v=$(printf %s "$tag" | tr -- - '~')+git$day.$n.$hash ;;
v[0-9]*) v=$(printf %s "${d#v}" | tr -- - '~') ;;
*) v=0.0~git$day.$d ;;
esac
echo "$v$dirty"
