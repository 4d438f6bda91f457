#!/bin/bash
# Issue 21 items 1, 2, 9: how each bad input of the probe ends, run against the checkout TREE (a fresh folder per
# case; the tiny inputs are made here). usage: bench/refusals.sh TREE   (. or an archive of an earlier commit)
TREE=$(cd "$1" && pwd); ROOT=$(cd "$(dirname "$0")/.." && pwd); PY=$ROOT/.venv/bin/python
W=$(mktemp -d /tmp/refuse.XXXX); mkdir -p $W/good/pkg $W/no-shared
printf 'def load(path):\n    """Read."""\n    return open(path).read()\n\n\ndef parse(text):\n    """Split."""\n    return text.split()\n\n\ndef run(path):\n    """Both."""\n    return parse(load(path))\n' > $W/good/pkg/io.py
touch $W/good/pkg/__init__.py
(cd $ROOT && $PY -c "from pathlib import Path; from tests.test_hostile_inputs_flows import toolset_folder; toolset_folder(Path('$W/toy'))")
run() {  # NAME MODULE ARGS...: exit status, seconds, files left under $W/out-NAME, the last line said
  name=$1; shift; d=$W/case-$name; mkdir $d; s=$(date +%s.%N)
  (cd $TREE && PREFECT_HOME=$d/.ph timeout 300 $PY -m "$@" >$d/.out 2>&1); rc=$?; e=$(date +%s.%N)
  echo "$name rc=$rc $(printf %.1f "$(echo "$e - $s" | bc)") s, files written: $(find $W/out-$name -type f 2>/dev/null | wc -l), last: $(tail -1 $d/.out | cut -c1-150)"
}
run tree-typo flows.mine_tdi --source tree --tree-paths $W/good,$W/typo --output-root $W/out-tree-typo
run tree-file flows.mine_tdi --source tree --tree-paths $W/good/pkg/io.py --output-root $W/out-tree-file
run validation-2 flows.mine_tdi --source tree --tree-paths $W/good --validation-fraction 2 --output-root $W/out-validation-2
run rows-per-shard-0 flows.mine_tdi --source tree --tree-paths $W/good --rows-per-shard 0 --output-root $W/out-rows-per-shard-0
run batch-size-0 flows.build_graph --toolset $W/toy --no-discriminator --batch-size 0 --warehouse $W/out-batch-size-0/tgr.duckdb
run neighbours--1 flows.build_graph --toolset $W/toy --no-discriminator --neighbours=-1 --warehouse $W/out-neighbours--1/tgr.duckdb
run no-shared flows.train_discriminator --benchmarks-root $W/no-shared --pretrain-data none --output $W/out-no-shared
rm -rf $W
