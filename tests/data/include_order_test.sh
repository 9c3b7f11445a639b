#!/bin/sh
# The data libraries include only downward (src/data/CMakeLists.txt gives the order): every `#include "data/..."`
# in src/data/<folder> names its own folder or one the folder may use. Prints each violation; exit 1 if any.
# usage: include_order_test.sh REPO_ROOT
set -eu
cd "$1/src/data"
allowed() {
  case "$1" in
    io) echo "io" ;;
    image) echo "io image" ;;
    tokenizer) echo "tokenizer" ;;
    template) echo "template" ;;
    loader) echo "io image tokenizer template loader" ;;
    dedup) echo "io image tokenizer template loader dedup" ;;
    tools) echo "io image tokenizer template loader tools" ;;
  esac
}
bad=0
for dir in */; do
  dir=${dir%/}
  ok=$(allowed "$dir")
  [ -n "$ok" ] || { echo "FAIL: src/data/$dir is not in the include order"; bad=1; continue; }
  for hit in $(grep -rno '#include "data/[a-z_]*/' "$dir" | sed 's/#include "data\///; s/\/$//'); do
    target=${hit##*:}
    case " $ok " in
      *" $target "*) ;;
      *) echo "FAIL: src/data/${hit%:*}: includes from data/$target, which $dir may not use"; bad=1 ;;
    esac
  done
done
# A file directly in src/data (outside every library folder) is not part of the order either.
for f in *.h *.cpp; do [ -e "$f" ] && { echo "FAIL: src/data/$f sits outside the library folders"; bad=1; }; done
[ $bad -eq 0 ] && echo "PASS: src/data includes follow io, image, tokenizer, template < loader < dedup, tools"
exit $bad
